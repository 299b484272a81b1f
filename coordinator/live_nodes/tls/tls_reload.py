"""The gRPC server's TLS certificate, re-read when its files change (cert-manager rotations).

gRPC asks `fetch` at each new TLS handshake; it returns a new configuration only when the
files' modification times changed (checked at most every `check_seconds`), else None (keep the
current one). A half-written or unreadable pair is logged and ignored: the server keeps
serving with the certificate it has, and tries again at the next check.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

log = logging.getLogger(__name__)


def _load_pair(cert_file: Path, key_file: Path) -> tuple[bytes, bytes]:
    """(key PEM, certificate PEM), checked to parse and to belong together."""
    cert_pem, key_pem = cert_file.read_bytes(), key_file.read_bytes()
    certificate = x509.load_pem_x509_certificate(cert_pem)
    key = serialization.load_pem_private_key(key_pem, password=None)
    public = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if certificate.public_key().public_bytes(*public) != key.public_key().public_bytes(*public):
        raise ValueError(f"{key_file} is not the key of {cert_file}")
    return key_pem, cert_pem


def not_after(cert_pem: bytes) -> datetime:
    """When a PEM certificate expires (UTC)."""
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


class ReloadingCertificate:
    """A certificate/key pair on disk as gRPC server credentials that follow the files."""

    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        *,
        monotonic: Callable[[], float],
        check_seconds: float = 10.0,
    ) -> None:
        self._cert_file, self._key_file = cert_file, key_file
        self._monotonic = monotonic
        self._check_seconds = check_seconds
        self._lock = threading.Lock()
        self._stamp = self._mtimes()
        self._next_check = monotonic() + check_seconds
        self.reloads = 0
        key, cert = _load_pair(cert_file, key_file)  # a bad pair at start is a startup error
        # When the certificate last loaded (the one new handshakes get) expires.
        self.not_after = not_after(cert)
        self._initial = grpc.ssl_server_certificate_configuration([(key, cert)])

    def _mtimes(self) -> tuple[int, int]:
        return (self._cert_file.stat().st_mtime_ns, self._key_file.stat().st_mtime_ns)

    def credentials(self) -> grpc.ServerCredentials:
        # gRPC documents None as "no change"; the stubs' Callable type leaves it out.
        return grpc.dynamic_ssl_server_credentials(self._initial, self.fetch)  # type: ignore[arg-type]

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """A new configuration if the files changed since the last one, else None."""
        with self._lock:
            now = self._monotonic()
            if now < self._next_check:
                return None
            self._next_check = now + self._check_seconds
            try:
                stamp = self._mtimes()
                if stamp == self._stamp:
                    return None
                key, cert = _load_pair(self._cert_file, self._key_file)
            except (OSError, ValueError) as err:
                log.warning("TLS certificate not reloaded", extra={"error": str(err)})
                return None
            self._stamp = stamp
            self.reloads += 1
            self.not_after = not_after(cert)
        log.info("TLS certificate reloaded", extra={"cert_file": str(self._cert_file)})
        return grpc.ssl_server_certificate_configuration([(key, cert)])


class MemoryCertificate:
    """A certificate/key pair held in memory (the coordinator's own, `--tls-secret`) as gRPC
    server credentials; `replace` makes new handshakes use a new pair."""

    def __init__(self, key: bytes, cert: bytes) -> None:
        self._lock = threading.Lock()
        self._pair = (key, cert)
        self._pending: tuple[bytes, bytes] | None = None
        self.reloads = 0

    @property
    def pair(self) -> tuple[bytes, bytes]:
        with self._lock:
            return self._pair

    @property
    def not_after(self) -> datetime:
        """When the newest pair's certificate expires (new handshakes get that pair)."""
        return not_after(self.pair[1])

    def replace(self, key: bytes, cert: bytes) -> None:
        with self._lock:
            if (key, cert) == self._pair:
                return
            self._pair = self._pending = (key, cert)

    def credentials(self) -> grpc.ServerCredentials:
        initial = grpc.ssl_server_certificate_configuration([self.pair])
        return grpc.dynamic_ssl_server_credentials(initial, self.fetch)  # type: ignore[arg-type]

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """The new pair once after `replace`, else None (keep the current one)."""
        with self._lock:
            pending, self._pending = self._pending, None
            if pending is None:
                return None
            self.reloads += 1
        log.info("TLS certificate replaced")
        return grpc.ssl_server_certificate_configuration([pending])
