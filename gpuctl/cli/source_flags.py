"""The flags that say where remote node truth is read from, and the NodeSource they make.

Default: the Kubernetes API (GPUNode objects) through the user's kubeconfig. With
`--coordinator ADDR`: the coordinator's NodeService over gRPC (TLS unless --insecure).
"""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Callable

from gpuctl.cli.kube_client import load_api_client
from gpuctl.cli.kube_nodes import KubeNodeSource
from gpuctl.cli.node_source import NodeSource

Clock = Callable[[], datetime.datetime]


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def add_source_flags(parser: argparse.ArgumentParser) -> None:
    kube = parser.add_argument_group("reading through the Kubernetes API (default)")
    kube.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig (default: $KUBECONFIG, ~/.kube/config)"
    )
    kube.add_argument("--context", metavar="NAME", help="kubeconfig context to use")


def make_source(args: argparse.Namespace, clock: Clock) -> NodeSource:
    return KubeNodeSource(load_api_client(args.kubeconfig, args.context), clock)
