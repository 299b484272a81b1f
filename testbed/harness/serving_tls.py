"""A CA and a serving certificate for 127.0.0.1/localhost (testbed/harness/certs.py), written
to a folder for a test's coordinator gRPC server (or any TLS server a test runs: the
authenticated Prometheus's proxy); clients verify it with the CA."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from coordinator.live_nodes.server import TlsFiles
from testbed.harness import certs


@dataclass(frozen=True)
class ServingTls:
    files: TlsFiles
    ca_pem: bytes


def serving_tls(folder: Path) -> ServingTls:
    now = datetime.datetime.now(datetime.UTC)
    ca = certs.make_ca(now, "gpuctl-grpc-test-ca")
    serving = certs.make_serving_cert(ca, now)
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / "tls.crt", folder / "tls.key"
    cert.write_bytes(serving.cert_pem)
    key.write_bytes(serving.key_pem)
    key.chmod(0o600)
    return ServingTls(TlsFiles(cert, key), ca.cert_pem)
