"""gpuctl.common's client helpers: transport checks, token files, metadata, failure words.

The failure details below are what grpc-core 1.85 really produced against the test servers
(wrong CA, TLS to plaintext, plaintext to TLS, a closed port, an unknown name).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import grpc
import pytest

from gpuctl.rpc.grpc_client import (
    ClientConfigError,
    ClientTransport,
    add_transport_arguments,
    bearer_metadata,
    channel_credentials,
    channel_options,
    read_token_file,
    transport_from_args,
)
from gpuctl.rpc.grpc_errors import describe_rpc_failure

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


def test_transport_checks_and_descriptions(tmp_path: Path) -> None:
    with pytest.raises(ClientConfigError, match="is not HOST:PORT"):
        ClientTransport("coordinator")
    with pytest.raises(ClientConfigError, match="cannot be combined"):
        ClientTransport("c:1", insecure=True, ca_file=tmp_path / "ca.pem")
    assert ClientTransport("c:1", insecure=True).describe() == "c:1 (plaintext, --insecure)"
    named = ClientTransport("10.0.0.5:9443", tls_server_name="coordinator.gpuctl-system.svc")
    assert named.describe() == (
        "10.0.0.5:9443 (TLS, CA system trust store, server name coordinator.gpuctl-system.svc)"
    )
    assert channel_options(named) == [
        ("grpc.ssl_target_name_override", "coordinator.gpuctl-system.svc")
    ]
    assert channel_options(ClientTransport("c:1")) == []


def test_flags_build_the_transport() -> None:
    parser = argparse.ArgumentParser()
    add_transport_arguments(parser, required=True, target_help="where")
    args = parser.parse_args(
        ["--coordinator", "c:9443", "--ca-file", "/ca.pem", "--tls-server-name", "n"]
    )
    assert transport_from_args(args) == ClientTransport("c:9443", Path("/ca.pem"), False, "n")


def test_the_ca_file_comes_from_the_flag_else_the_environment_else_the_system_store() -> None:
    parser = argparse.ArgumentParser()
    add_transport_arguments(parser, required=True, target_help="where")
    env = {"GPUCTL_CA_FILE": "/env-ca.pem"}
    flagged = parser.parse_args(["--coordinator", "c:1", "--ca-file", "/flag.pem"])
    assert transport_from_args(flagged, env).ca_file == Path("/flag.pem")
    plain = parser.parse_args(["--coordinator", "c:1"])
    assert transport_from_args(plain, env).ca_file == Path("/env-ca.pem")
    assert transport_from_args(plain, {}).ca_file is None
    assert transport_from_args(plain, {}).describe() == "c:1 (TLS, CA system trust store)"
    insecure = parser.parse_args(["--coordinator", "c:1", "--insecure"])
    assert transport_from_args(insecure, env) == ClientTransport("c:1", insecure=True)


def test_token_files(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("eyJhbGciOi.payload.sig\n")
    assert read_token_file(token) == "eyJhbGciOi.payload.sig"
    assert bearer_metadata("abc") == (("authorization", "Bearer abc"),)
    with pytest.raises(ClientConfigError, match=r"token file .*absent does not exist"):
        read_token_file(tmp_path / "absent")
    token.write_text("  \n")
    with pytest.raises(ClientConfigError, match="is empty"):
        read_token_file(token)
    token.write_text("two words\n")
    with pytest.raises(ClientConfigError, match="more than one word"):
        read_token_file(token)


def test_a_ca_file_must_hold_a_certificate(tmp_path: Path) -> None:
    garbage = tmp_path / "ca.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ClientConfigError, match="holds no PEM certificate"):
        channel_credentials(garbage)
    with pytest.raises(ClientConfigError, match="cannot be read"):
        channel_credentials(tmp_path / "absent.pem")


@pytest.mark.parametrize(
    ("code", "details", "phrase"),
    [
        (
            UNAVAILABLE,
            "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:37757: Tls "
            "handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:1000007d:SSL routines:"
            "OPENSSL_internal:CERTIFICATE_VERIFY_FAILED: unable to get local issuer certificate",
            "TLS verification failed (check --ca-file / --tls-server-name)",
        ),
        (
            UNAVAILABLE,
            "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:42847: Custom "
            "verification check failed with error: UNAUTHENTICATED: Hostname Verification Check "
            "failed.",
            "TLS verification failed (check --ca-file / --tls-server-name)",
        ),
        (
            UNAVAILABLE,
            "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:42165: Tls "
            "handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:100000f7:SSL routines:"
            "OPENSSL_internal:WRONG_VERSION_NUMBER: Invalid certificate verification context",
            "TLS handshake failed: the server does not speak TLS (a plaintext server needs "
            "--insecure)",
        ),
        (
            UNAVAILABLE,
            "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:37757: "
            "Socket closed",
            "the connection closed during setup (--insecure against a TLS server?)",
        ),
        (
            UNAVAILABLE,
            "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Failed to "
            "connect to remote host: Connection refused",
            "coordinator unreachable",
        ),
        (
            UNAVAILABLE,
            "errors resolving no-such-host.invalid:443: [field:hostname lookup error:address "
            "lookup failed for no-such-host.invalid:443: Domain name not found]",
            "coordinator unreachable: its name does not resolve",
        ),
        (UNAVAILABLE, "something new", "coordinator unavailable"),
        (
            grpc.StatusCode.UNAUTHENTICATED,
            "token review failed",
            "UNAUTHENTICATED (the coordinator rejected the token)",
        ),
        (
            grpc.StatusCode.PERMISSION_DENIED,
            "node mismatch: the token is bound to a, Hello names b",
            'PERMISSION_DENIED "node mismatch" (the token is bound to another node)',
        ),
        (grpc.StatusCode.PERMISSION_DENIED, "not the agent's ServiceAccount", "PERMISSION_DENIED"),
        (grpc.StatusCode.INTERNAL, "", "INTERNAL"),
        (
            grpc.StatusCode.INTERNAL,
            "Internal error from Core",
            "the coordinator ended the stream as a message was being sent, and gRPC Python lost "
            "its reason (grpc/grpc#36066; the coordinator logs it as 'agent stream refused')",
        ),
        (grpc.StatusCode.INTERNAL, "stream terminated by RST_STREAM", "INTERNAL"),
    ],
)
def test_failures_in_words(code: grpc.StatusCode, details: str, phrase: str) -> None:
    described = describe_rpc_failure(code, details)
    assert described == f"{phrase}: {details or '(no details)'}"
