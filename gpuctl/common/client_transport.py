"""How the agent and the CLI reach the coordinator: address, TLS trust, token; and the flags.

Shared by `gpuctl-agent run` and the CLI's `--coordinator`, so the flags and their meaning
exist once. No grpc import here: parsing flags (and `gpuctl-agent inspect`, which shares the
parser) stays cheap; channels are opened by gpuctl.rpc.grpc_client.

- TLS by default, verifying the server against `--ca-file` (else $GPUCTL_CA_FILE, else the
  system trust store: a publicly trusted certificate, e.g. from an ACME issuer, needs no
  file); `--tls-server-name` overrides the name checked in the certificate (dialing an IP, or
  a Service through a port-forward); plaintext only with an explicit `--insecure`.
- Identity is a bearer token sent as `authorization: Bearer <token>` call metadata, passed on
  each call rather than as channel call-credentials so it works over `--insecure` too and a
  rotated token is picked up by the next call. Token files are read when asked, never
  cached: kubelet rotates projected tokens on disk.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

AUTHORIZATION = "authorization"
# The CA bundle when --ca-file is not given (a kubeconfig-like default for the CLI; the
# DaemonSet passes --ca-file, or neither for the system trust store).
CA_FILE_ENV = "GPUCTL_CA_FILE"


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


def add_transport_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    *,
    required: bool,
    target_help: str,
) -> None:
    """Add --coordinator, --ca-file, --tls-server-name and --insecure to `parser` (or to one
    of its argument groups)."""
    parser.add_argument("--coordinator", metavar="HOST:PORT", required=required, help=target_help)
    parser.add_argument(
        "--ca-file",
        type=Path,
        metavar="PEM",
        help=f"verify the coordinator's certificate against this CA bundle "
        f"(default: ${CA_FILE_ENV}, else the system trust store)",
    )
    parser.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="expect this name in the coordinator's certificate (default: HOST)",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext, no TLS: only for local runs against a plaintext coordinator; not "
        "with --ca-file or --tls-server-name",
    )


def transport_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] = os.environ
) -> ClientTransport:
    """The ClientTransport the flags of add_transport_arguments describe ($GPUCTL_CA_FILE
    when --ca-file is absent; never with --insecure)."""
    ca_file = args.ca_file
    if ca_file is None and not args.insecure and environ.get(CA_FILE_ENV):
        ca_file = Path(environ[CA_FILE_ENV])
    return ClientTransport(
        target=args.coordinator,
        ca_file=ca_file,
        insecure=args.insecure,
        tls_server_name=args.tls_server_name,
    )
