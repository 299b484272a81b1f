"""Tests of the wire's messages (gpuctl/api)."""
