"""`gpuctl node inspect`: show one node's GPUs, driver module and unload blockers."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.cli.durations import short_age
from gpuctl.cli.errors import CommandError
from gpuctl.cli.help_format import examples
from gpuctl.cli.local_agent import LocalInspectionError, inspect_locally
from gpuctl.cli.node_source import DEFAULT_FRESH_TIMEOUT
from gpuctl.cli.node_view import NodeView
from gpuctl.cli.object_output import add_output, render_document
from gpuctl.cli.output import to_document
from gpuctl.cli.report_table import render_report
from gpuctl.cli.source_flags import Clock, add_source_flags, make_source, utc_now

FORMATS = ("table", "json", "yaml")


def add_parser(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subcommands.add_parser(
        "inspect",
        help="show a node's Intel GPUs, the xe module and what blocks unloading it",
        description=(
            "Show a node's Intel GPUs (PCI vendor 0x8086, display class): driver, SR-IOV VFs, "
            "processes holding /dev/dri open and whose each is (a pod, named through the API "
            "server, else by its UID; a host process; unknown); the loaded xe module (version, "
            "provenance, refcnt); and every reason unloading xe now would fail or hurt."
        ),
        epilog=(
            examples(
                ("gpuctl node inspect --local", "this machine"),
                ("gpuctl node inspect --local --host-root /host -o json", "from a Pod"),
                ("gpuctl node inspect worker-3", "its latest report, through the API"),
                ("gpuctl node inspect worker-3 --fresh", "ask its agent now and wait"),
            )
            + "\n\n"
            "exit codes: 0 report printed; 2 bad arguments or unusable host root; 1 other errors"
        ),
    )
    parser.add_argument(
        "node",
        nargs="?",
        metavar="NODE",
        help="a GPU node of the cluster, as its agent reported it (see `gpuctl nodes`)",
    )
    parser.add_argument(
        "--local",
        action="store_true",
        help="inspect this machine directly (reads /sys, /proc, /dev, /lib/modules)",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="with NODE: have the coordinator ask the node's agent for a new report and wait",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_FRESH_TIMEOUT,
        metavar="SECONDS",
        help="how long --fresh waits (default: %(default)g)",
    )
    parser.add_argument(
        "--host-root",
        type=Path,
        default=Path("/"),
        metavar="DIR",
        help="read the host's files under DIR, e.g. /host in a pod (default: /)",
    )
    parser.add_argument(
        "--node-name",
        metavar="NAME",
        help="node name to put in the report (default: $NODE_NAME, else the host name)",
    )
    add_output(
        parser,
        FORMATS,
        "table (default) for people; json (proto3 JSON of NodeReport) or yaml for scripts",
    )
    add_source_flags(parser)
    parser.set_defaults(run=run)


def run(
    args: argparse.Namespace,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    clock: Clock = utc_now,
) -> int:
    if args.local == bool(args.node):
        err.write("gpuctl node inspect: give either NODE or --local (see --help)\n")
        return 2
    if args.local and args.fresh:
        err.write("gpuctl node inspect: --fresh is for NODE; --local is always fresh\n")
        return 2
    if args.local:
        return _run_local(args, out, err)
    return _run_remote(args, out, clock)


def _run_local(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        report = inspect_locally(args.host_root, args.node_name)
    except LocalInspectionError as error:
        err.write(f"gpuctl: {error}\n")
        return error.exit_code
    out.write(_render(report, args.output))
    return 0


def _run_remote(args: argparse.Namespace, out: TextIO, clock: Clock) -> int:
    source = make_source(args, clock)
    view = source.get_node(args.node, fresh=args.fresh, timeout=args.timeout)
    if view.report is None:
        raise CommandError(f'no report for "{view.name}": {view.problem}')
    if args.output == "table":
        out.write(remote_header(view, source.rollout_of(view.name)))
        out.write(render_report(view.report, source.pods_on(view.name)))
        return 0
    out.write(_render(view.report, args.output))
    return 0


def _render(report: pb.NodeReport, output: str) -> str:
    if output == "table":
        return render_report(report)
    return render_document(to_document(report), output)


def remote_header(view: NodeView, rollout: str = "") -> str:
    """How far to trust a remote report: the agent's session and the report's age; then
    where the rollout has the node (`rollout`, node_rollout.py)."""
    agent = {True: "connected", False: "DISCONNECTED", None: "unknown"}[view.connected]
    line = f"Agent {agent}, report received {short_age(view.age)} ago"
    if view.agent_version:
        line += f", agent {view.agent_version}"
    lines = [line + "\n"]
    if view.connected is not True or view.problem:
        why = view.problem or "the agent is not connected"
        lines.append(f"WARNING: {why}; this report may no longer be true.\n")
    return "".join(lines) + rollout + "\n"
