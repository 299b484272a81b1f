"""Integration tests of the installed `gpuctl` CLI against the real API server."""
