"""`gpuctl nodes`: every GPU node with its GPUs, drivers, module, blockers and report age."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TextIO

from gpuctl.cli.errors import CommandError
from gpuctl.cli.gpudriver_api import GpuDriverApi
from gpuctl.cli.help_format import examples, with_examples
from gpuctl.cli.kernel_check import exit_code, kernel_check, render
from gpuctl.cli.kmm_preflight import add_timeout_flag
from gpuctl.cli.kube_client import load_api_client
from gpuctl.cli.kube_nodes import KubeNodeSource
from gpuctl.cli.nodes_table import render_nodes
from gpuctl.cli.nodes_watch import GPUNODE_RESOURCE, watch_nodes
from gpuctl.cli.object_output import add_object_output, render_objects
from gpuctl.cli.reporting import reporting_shortfall
from gpuctl.cli.source_flags import Clock, add_source_flags, make_source, utc_now


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "nodes",
        help="list GPU nodes: GPUs, drivers, module version, blockers, report age",
        description=(
            "List every GPU node whose agent has reported: GPUs (and VFs), the drivers they "
            "are bound to, the xe module's version or backport tag, what blocks unloading it, "
            "how old the report is, and whether the agent is connected. A node whose agent "
            "is not connected shows its blockers as unknown."
        ),
        epilog=with_examples(
            "exit codes: 0 listed; 1 the nodes could not be read (the reason is printed), or "
            "fewer than --require-reporting nodes report; with --watch, 130 once interrupted "
            "(Ctrl-C). "
            "With --kernel-check: 0 every node's next kernel has a driver; 1 one has not; 3 "
            "one could not be checked.",
            examples(
                ("gpuctl nodes", "every GPU node"),
                ("gpuctl nodes -l pool=gpu -o wide", "those of one pool, with kernels"),
                ("gpuctl nodes -w", "then each change, until Ctrl-C"),
                ("gpuctl nodes --kernel-check", "before a kernel upgrade"),
            ),
        ),
    )
    parser.add_argument(
        "--kernel-check",
        action="store_true",
        help="list the nodes that would boot another kernel (the newest installed one) and "
        "whether each GPUDriver targeting them has a driver for it: a mapping, an image "
        "(through KMM's PreflightValidation) and, where the node enforces module signatures, "
        "a signed one (docs/kernel-upgrades.md)",
    )
    add_timeout_flag(parser, when="with --kernel-check: ")
    parser.add_argument(
        "--require-reporting",
        type=_count,
        default=0,
        metavar="N",
        help="exit 1, naming the silent nodes, unless at least N nodes have an agent "
        "connected with a fresh report (the chart's `helm test` runs this against the "
        "coordinator)",
    )
    add_object_output(parser, wide=True)
    parser.add_argument(
        "-l",
        "--selector",
        metavar="SELECTOR",
        help="only the GPU nodes whose Node this label selector matches, as kubectl's "
        "(e.g. -l pool=gpu,zone!=b); reads the Nodes through the Kubernetes API",
    )
    parser.add_argument(
        "--no-headers",
        action="store_true",
        help="with -o table, wide or custom-columns: no header line, as kubectl's (for scripts)",
    )
    parser.add_argument(
        "-w",
        "--watch",
        action="store_true",
        help="after the list, print each change of a GPU node (a new report, its agent "
        "connecting or going silent, a node added or deleted) until interrupted, as "
        "`kubectl get -w`; through the Kubernetes API only",
    )
    parser.add_argument(
        "--output-watch-events",
        action="store_true",
        help="with --watch: the change's type (ADDED, MODIFIED, DELETED) in front of each "
        "line, or {type, object} around each json or yaml object, as kubectl's",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        metavar="NAMESPACE",
        help="taken as kubectl takes it for Nodes: GPUNodes and Nodes belong to no namespace, "
        "so it narrows nothing (a note on stderr says so)",
    )
    add_source_flags(parser)
    parser.set_defaults(run=run)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _selected(source: object, selector: str | None) -> set[str] | None:
    """The Nodes -l matches (None: no -l)."""
    if selector is None:
        return None
    if not isinstance(source, KubeNodeSource):
        raise CommandError(
            "-l reads the Nodes' labels through the Kubernetes API; drop --coordinator"
        )
    return source.node_names(selector)


def _kept(name: str, selected: set[str] | None) -> bool:
    return selected is None or name in selected


def run(
    args: argparse.Namespace,
    out: TextIO = sys.stdout,
    clock: Clock = utc_now,
    now: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    *,
    err: TextIO = sys.stderr,
) -> int:
    if args.require_reporting and (args.kernel_check or args.output not in ("table", "wide")):
        raise CommandError(
            "--require-reporting checks the node list itself: not with --kernel-check or -o "
            f"{args.output}"
        )
    if args.namespace is not None:
        err.write(f"note: GPU nodes belong to no namespace; -n {args.namespace} narrows nothing\n")
    if args.output_watch_events and not args.watch:
        raise CommandError("--output-watch-events goes with --watch")
    if args.watch:
        if args.kernel_check or args.require_reporting:
            raise CommandError(
                "--watch follows the node list: not with --kernel-check or --require-reporting"
            )
        source = make_source(args, clock)
        if not isinstance(source, KubeNodeSource):
            raise CommandError(
                "--watch follows the GPUNodes of the Kubernetes API; drop --coordinator"
            )
        return watch_nodes(
            source,
            args.selector,
            args.output,
            out,
            clock,
            headers=not args.no_headers,
            show_events=args.output_watch_events,
        )
    source = make_source(args, clock)
    selected = _selected(source, args.selector)
    if args.output not in ("table", "wide"):
        if args.kernel_check:
            raise CommandError(f"-o {args.output} lists GPUNodes; --kernel-check prints a table")
        if not isinstance(source, KubeNodeSource):
            raise CommandError(
                f"-o {args.output} prints the GPUNode objects of the Kubernetes API; drop "
                "--coordinator"
            )
        objects = [o for o in source.list_objects() if _kept(o["metadata"]["name"], selected)]
        out.write(
            render_objects(GPUNODE_RESOURCE, objects, args.output, headers=not args.no_headers)
        )
        return 0
    views = [view for view in source.list_nodes() if _kept(view.name, selected)]
    if not args.kernel_check:
        wide, headers = args.output == "wide", not args.no_headers
        out.write(render_nodes(views, wide=wide, show_headers=headers))
        shortfall = reporting_shortfall(views, args.require_reporting)
        if shortfall:
            raise CommandError(shortfall)
        return 0
    api_client = load_api_client(args.kubeconfig, args.context, args.request_timeout)
    drivers = [
        d for d in GpuDriverApi(api_client).list_all() if (d.get("spec") or {}).get("kernelModule")
    ]
    rows = kernel_check(api_client, views, drivers, timeout=args.timeout, now=now, sleep=sleep)
    out.write(render(rows))
    return exit_code(rows)
