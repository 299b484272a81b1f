"""Client side of gpuctl's gRPC connections: TLS channel, bearer token, shared flags.

The agent (`gpuctl-agent run --coordinator`) and the CLI (`gpuctl ... --coordinator`) dial
the coordinator the same way, so the flags, their meaning and the channel they produce live
here once:

- TLS by default, verifying the server against `--ca-file` (the system trust store when no
  file is given); `--tls-server-name` overrides the name checked in the certificate (dialing
  an IP, or a Service through a port-forward); plaintext only with an explicit `--insecure`.
- Identity is a bearer token sent as `authorization: Bearer <token>` call metadata, passed on
  each call rather than as channel call-credentials so it works over `--insecure` too and a
  rotated token is picked up by the next call.

Files are read when a channel is opened, never at import: a CA bundle or a projected token
rotated on disk is used by the next connection.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio

AUTHORIZATION = "authorization"

ChannelOptions = list[tuple[str, str | int]]


class ClientConfigError(Exception):
    """A transport setting or file the client cannot use; the message says which and why."""


@dataclass(frozen=True)
class ClientTransport:
    """How to reach a gRPC server: `target` is HOST:PORT; `ca_file` None means the system
    trust store; `insecure` means plaintext (and then no CA file or server name applies)."""

    target: str
    ca_file: Path | None = None
    insecure: bool = False
    tls_server_name: str | None = None

    def __post_init__(self) -> None:
        if not self.target or ":" not in self.target:
            raise ClientConfigError(f"server address {self.target!r} is not HOST:PORT")
        if self.insecure and (self.ca_file is not None or self.tls_server_name):
            raise ClientConfigError(
                "--insecure means plaintext: it cannot be combined with --ca-file or "
                "--tls-server-name"
            )

    def describe(self) -> str:
        """One line for logs: where and how."""
        if self.insecure:
            return f"{self.target} (plaintext, --insecure)"
        trust = str(self.ca_file) if self.ca_file else "system trust store"
        name = f", server name {self.tls_server_name}" if self.tls_server_name else ""
        return f"{self.target} (TLS, CA {trust}{name})"


def read_token_file(path: Path) -> str:
    """The token in `path` without surrounding whitespace; ClientConfigError when the file
    cannot be read or is empty (kubelet may not have written the projected token yet)."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise ClientConfigError(f"token file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ClientConfigError(f"token file {path} cannot be read: {error}") from None
    if not token:
        raise ClientConfigError(f"token file {path} is empty")
    if any(character.isspace() for character in token):
        raise ClientConfigError(f"token file {path} holds more than one word")
    return token


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying `token` the way the coordinator reads it."""
    return ((AUTHORIZATION, f"Bearer {token}"),)


def channel_credentials(ca_file: Path | None) -> grpc.ChannelCredentials:
    """TLS credentials trusting the CA bundle in `ca_file` (PEM), or the system roots."""
    if ca_file is None:
        return grpc.ssl_channel_credentials()
    try:
        roots = ca_file.read_bytes()
    except OSError as error:
        raise ClientConfigError(f"CA file {ca_file} cannot be read: {error}") from None
    if b"-----BEGIN CERTIFICATE-----" not in roots:
        raise ClientConfigError(f"CA file {ca_file} holds no PEM certificate")
    return grpc.ssl_channel_credentials(root_certificates=roots)


def channel_options(
    transport: ClientTransport, extra: ChannelOptions | None = None
) -> ChannelOptions:
    """gRPC channel arguments for `transport` (the server-name override) plus `extra`."""
    options: ChannelOptions = list(extra or [])
    if transport.tls_server_name:
        options.append(("grpc.ssl_target_name_override", transport.tls_server_name))
    return options


def open_channel(transport: ClientTransport, extra: ChannelOptions | None = None) -> grpc.Channel:
    """A blocking-API channel (the CLI's)."""
    options = channel_options(transport, extra)
    if transport.insecure:
        return grpc.insecure_channel(transport.target, options=options)
    credentials = channel_credentials(transport.ca_file)
    return grpc.secure_channel(transport.target, credentials, options=options)


def open_aio_channel(
    transport: ClientTransport, extra: ChannelOptions | None = None
) -> grpc.aio.Channel:
    """An asyncio-API channel (the agent's). Must be called inside a running event loop."""
    options = channel_options(transport, extra)
    if transport.insecure:
        return grpc.aio.insecure_channel(transport.target, options=options)
    credentials = channel_credentials(transport.ca_file)
    return grpc.aio.secure_channel(transport.target, credentials, options=options)


def add_transport_arguments(
    parser: argparse.ArgumentParser, *, required: bool, target_help: str
) -> None:
    """Add --coordinator, --ca-file, --tls-server-name and --insecure to `parser`."""
    parser.add_argument("--coordinator", metavar="HOST:PORT", required=required, help=target_help)
    parser.add_argument(
        "--ca-file",
        type=Path,
        metavar="PEM",
        help="verify the coordinator's certificate against this CA bundle "
        "(default: the system trust store)",
    )
    parser.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="expect this name in the coordinator's certificate instead of HOST",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext, no TLS: only for local runs against a plaintext coordinator",
    )


def transport_from_args(args: argparse.Namespace) -> ClientTransport:
    """The ClientTransport the flags of add_transport_arguments describe."""
    return ClientTransport(
        target=args.coordinator,
        ca_file=args.ca_file,
        insecure=args.insecure,
        tls_server_name=args.tls_server_name,
    )
