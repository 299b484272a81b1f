"""Integration tests of live node reports: agents' gRPC streams over TLS, bound tokens, the
GPUNode mirror, the read API, leadership, and agent reports as the unload guard's source."""
