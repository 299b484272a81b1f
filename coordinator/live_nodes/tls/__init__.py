"""The gRPC server's TLS: the coordinator's own Secret and CA (managed_tls.py,
self_signed.py) and the certificate re-read when its files change (tls_reload.py)."""
