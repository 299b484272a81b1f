"""`gpuctl node inspect`: show one node's GPUs, driver module and unload blockers."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from gpuctl.cli.local_agent import LocalInspectionError, inspect_locally
from gpuctl.cli.output import to_json, to_yaml
from gpuctl.cli.report_table import render_report

FORMATS = ("table", "json", "yaml")


def add_parser(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subcommands.add_parser(
        "inspect",
        help="show a node's Intel GPUs, the xe module and what blocks unloading it",
        description=(
            "Show a node's Intel GPUs (PCI vendor 0x8086, display class): driver, SR-IOV VFs, "
            "processes holding /dev/dri open; the loaded xe module (version, provenance, "
            "refcnt); and every reason unloading xe now would fail or hurt."
        ),
        epilog=(
            "examples:\n"
            "  gpuctl node inspect --local\n"
            "  gpuctl node inspect --local --host-root /host -o json\n"
            "\n"
            "exit codes: 0 report printed; 2 bad arguments or unusable host root; 1 other errors"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--local",
        action="store_true",
        help="inspect this machine directly (reads /sys, /proc, /dev, /lib/modules)",
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
    parser.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default="table",
        help="table for people; json (proto3 JSON of NodeReport) or yaml for scripts",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    if not args.local:
        err.write(
            "gpuctl node inspect: give --local to inspect this machine "
            "(inspecting another node through the coordinator is not available yet)\n"
        )
        return 2
    try:
        report = inspect_locally(args.host_root, args.node_name)
    except LocalInspectionError as error:
        err.write(f"gpuctl: {error}\n")
        return error.exit_code
    render = {"table": render_report, "json": to_json, "yaml": to_yaml}[args.output]
    out.write(render(report))
    return 0
