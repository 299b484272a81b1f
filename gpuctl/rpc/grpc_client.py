"""Open gRPC channels to the coordinator as a ClientTransport describes them.

The transport, token and flag helpers live in gpuctl.common.client_transport (no grpc import)
and are re-exported here, so `from gpuctl.rpc.grpc_client import ...` finds all of them.
Files (the CA bundle) are read when a channel is opened, never at import: a bundle rotated
on disk is used by the next connection.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import grpc.aio

from gpuctl.common.client_transport import (
    AUTHORIZATION,
    ClientConfigError,
    ClientTransport,
    add_transport_arguments,
    bearer_metadata,
    read_token_file,
    transport_from_args,
)

__all__ = [
    "AUTHORIZATION",
    "ChannelOptions",
    "ClientConfigError",
    "ClientTransport",
    "add_transport_arguments",
    "bearer_metadata",
    "channel_credentials",
    "channel_options",
    "open_aio_channel",
    "open_channel",
    "read_token_file",
    "transport_from_args",
]

ChannelOptions = list[tuple[str, str | int]]


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
