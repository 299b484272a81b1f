"""`gpuctl nodes`: every GPU node with its GPUs, drivers, module, blockers and report age."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from gpuctl.cli.nodes_table import render_nodes
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
        epilog="exit codes: 0 listed; 1 the nodes could not be read (the reason is printed)",
    )
    add_source_flags(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO = sys.stdout, clock: Clock = utc_now) -> int:
    out.write(render_nodes(make_source(args, clock).list_nodes()))
    return 0
