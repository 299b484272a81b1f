"""The flags that say where remote node truth is read from, and the NodeSource they make.

Default: the Kubernetes API (GPUNode objects) through the user's kubeconfig. With
`--coordinator ADDR`: the coordinator's NodeService over gRPC (TLS unless --insecure).
"""

from __future__ import annotations

import argparse
import datetime
import os
from collections.abc import Callable
from pathlib import Path

from gpuctl.cli.coordinator_nodes import CoordinatorNodeSource
from gpuctl.cli.errors import CommandError
from gpuctl.cli.kube_client import DEFAULT_REQUEST_TIMEOUT, load_api_client
from gpuctl.cli.kube_nodes import KubeNodeSource
from gpuctl.cli.node_source import NodeSource
from gpuctl.rollout.input.settings import SettingsError, parse_duration
from gpuctl.rpc.grpc_client import (
    ClientConfigError,
    add_transport_arguments,
    read_token_file,
    transport_from_args,
)

TOKEN_ENV = "GPUCTL_TOKEN"  # noqa: S105 (the name of an environment variable)

Clock = Callable[[], datetime.datetime]


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def request_timeout_seconds(text: str) -> float:
    """--request-timeout as kubectl takes it: a duration (30s, 1m, 1h30m) or a number of
    seconds; more than 0 (kubectl's 0, no limit at all, is not offered: a request to a server
    that never answers would hang the command)."""
    try:
        value = float(text)
    except ValueError:
        try:
            value = parse_duration(text)
        except SettingsError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is neither a duration (30s, 1m, 1h30m) nor a number of seconds"
            ) from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0 seconds")
    return value


def add_kube_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--kubeconfig and --context, read by kube_client.load_api_client."""
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="the kubeconfig to use (default: $KUBECONFIG, else ~/.kube/config)",
    )
    parser.add_argument(
        "--context",
        metavar="NAME",
        help="the kubeconfig context to use (default: its current context)",
    )
    parser.add_argument(
        "--request-timeout",
        type=request_timeout_seconds,
        default=DEFAULT_REQUEST_TIMEOUT,
        metavar="DURATION",
        help="how long one Kubernetes API request may take before the command gives up on it: "
        "a duration (30s, 1m) or seconds, as kubectl's (default: %(default)gs)",
    )


def add_source_flags(parser: argparse.ArgumentParser) -> None:
    add_kube_flags(parser.add_argument_group("reading through the Kubernetes API (default)"))
    direct = parser.add_argument_group("reading from the coordinator directly (gRPC)")
    add_transport_arguments(
        direct,
        required=False,
        target_help="read from the coordinator's NodeService at HOST:PORT instead of the API",
    )
    direct.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help=f"bearer token for the coordinator (default: ${TOKEN_ENV})",
    )


def make_source(args: argparse.Namespace, clock: Clock) -> NodeSource:
    if args.coordinator is None:
        api_client = load_api_client(
            args.kubeconfig, args.context, args.request_timeout, or_else="or use --coordinator ADDR"
        )
        return KubeNodeSource(api_client, clock)
    try:
        token = read_token_file(args.token_file) if args.token_file else os.environ.get(TOKEN_ENV)
        return CoordinatorNodeSource(transport_from_args(args), token)
    except ClientConfigError as error:
        raise CommandError(str(error)) from error
