"""The gRPC server follows its certificate files (rotation) over real TLS sockets.

No API server is needed: streams without a token end UNAUTHENTICATED before any review, and
reaching that status proves the TLS handshake succeeded.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import grpc
import pytest

from coordinator.live_nodes.server import AgentServer, ServerConfig, TlsFiles
from coordinator.live_nodes.streams.agent_service import AgentServiceConfig
from coordinator.live_nodes.streams.registry import Registry
from coordinator.live_nodes.tls.tls_reload import ReloadingCertificate
from testbed.agent_client import AgentClient
from testbed.harness import certs
from tests.support.clock import ManualClock
from tests.support.memory_api import MemoryApi

NOW = datetime.datetime.now(datetime.UTC)


def _write_pair(
    folder: Path, ca: certs.KeyPair, stamp: int, issued: datetime.datetime = NOW
) -> TlsFiles:
    serving = certs.make_serving_cert(ca, issued)
    files = TlsFiles(folder / "tls.crt", folder / "tls.key")
    files.cert_file.write_bytes(serving.cert_pem)
    files.key_file.write_bytes(serving.key_pem)
    for path in (files.cert_file, files.key_file):
        os.utime(path, ns=(stamp, stamp))
    return files


def _status(port: int, ca: certs.KeyPair) -> grpc.StatusCode:
    with AgentClient(f"localhost:{port}", token=None, root_certificate=ca.cert_pem) as agent:
        agent.hello("gpu-1")
        code, _ = agent.final_status()
    return code


def test_a_rotated_certificate_is_served_from_the_next_handshake(tmp_path: Path) -> None:
    first_ca, second_ca = certs.make_ca(NOW, "first"), certs.make_ca(NOW, "second")
    files = _write_pair(tmp_path, first_ca, 1_000_000_000)
    clock = ManualClock()
    api = MemoryApi()
    server = AgentServer(
        api,
        ServerConfig(
            agents=AgentServiceConfig(audience="a", agent_username="u"),
            host="127.0.0.1",
            port=0,
            tls=files,
        ),
        Registry(clock, clock.wall),
        monotonic=clock,
        wall_clock=clock.wall,
        epoch_clock=clock,
    )
    server.start()
    try:
        assert _status(server.port, first_ca) is grpc.StatusCode.UNAUTHENTICATED
        assert server.certificate is not None
        first_expiry = server.certificate.not_after
        _write_pair(tmp_path, second_ca, 2_000_000_000, issued=NOW - datetime.timedelta(days=3))
        clock.advance(11)  # past the check interval
        assert _status(server.port, second_ca) is grpc.StatusCode.UNAUTHENTICATED
        assert _status(server.port, first_ca) is grpc.StatusCode.UNAVAILABLE
        assert server.certificate.reloads == 1
        # gpuctl_tls_certificate_expiry_timestamp_seconds follows the certificate served.
        assert first_expiry - server.certificate.not_after == datetime.timedelta(days=3)

        # A pair that does not belong together is ignored; the rotated one stays in service.
        files.key_file.write_bytes(certs.make_serving_cert(second_ca, NOW).key_pem)
        os.utime(files.key_file, ns=(3_000_000_000, 3_000_000_000))
        clock.advance(11)
        assert _status(server.port, second_ca) is grpc.StatusCode.UNAUTHENTICATED
        assert server.certificate.reloads == 1
    finally:
        server.stop()
    assert api.requests == []


def test_a_mismatched_pair_at_start_is_refused(tmp_path: Path) -> None:
    ca = certs.make_ca(NOW)
    files = _write_pair(tmp_path, ca, 1_000_000_000)
    files.key_file.write_bytes(certs.make_serving_cert(ca, NOW).key_pem)
    with pytest.raises(ValueError, match="is not the key of"):
        ReloadingCertificate(files.cert_file, files.key_file, monotonic=ManualClock())
