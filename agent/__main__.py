"""`gpuctl-agent` (also `python -m agent`): `inspect` once, or `run` the node daemon.

`inspect` prints this node's NodeReport as binary protobuf on stdout; `gpuctl node inspect
--local` (which may not import the agent) and people on a node use it. A bad host root is
one line on stderr and exit status 2, never a traceback. `run` is agent.daemon.command.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from agent.daemon.flags import add_run_parser
from agent.hostroot import HostRootError
from agent.inspect import inspect_node

EXIT_BAD_HOST_ROOT = 2
PROG = "gpuctl-agent"


def default_node_name(host_root: Path) -> str:
    """NODE_NAME from the environment (the DaemonSet sets it), else the host's hostname."""
    from_env = os.environ.get("NODE_NAME", "").strip()
    if from_env:
        return from_env
    try:
        return (host_root / "proc/sys/kernel/hostname").read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="gpuctl node agent: reads the truth about this node's Intel GPUs and xe "
        "module; `run` streams it to the coordinator, `inspect` prints it once.",
        epilog="`python -m agent` is the same command. See `gpuctl-agent COMMAND --help`.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    inspect = commands.add_parser(
        "inspect",
        help="write this node's NodeReport (binary protobuf) to stdout",
        description=(
            "Inspect the node mounted at the host root (PCI functions in sys/, DRM clients "
            "in proc/, the xe module in sys/module and lib/modules/) and write the "
            "gpuctl.api.v1alpha1.NodeReport, serialized as binary protobuf, to stdout. "
            "Exit status 2 when the host root is not a Linux root."
        ),
        epilog=(
            "Anything unreadable (a permission error, garbage in a sysfs file, a process "
            "exiting mid-scan) is reported inside the NodeReport as a warning, and as a "
            "blocker when it matters to an unload; it never fails the command. "
            "`gpuctl node inspect --local` runs this command and prints the report as JSON."
        ),
    )
    inspect.add_argument(
        "--host-root",
        type=Path,
        default=Path("/"),
        metavar="DIR",
        help="read the node under DIR: its sys/, proc/, boot/, lib/modules/ and module "
        "configuration directories (default: /; the DaemonSet mounts those host paths, and "
        "only those, under /host)",
    )
    inspect.add_argument(
        "--node-name",
        metavar="NAME",
        help="node name for the report (default: $NODE_NAME, else DIR/proc/sys/kernel/hostname)",
    )
    add_run_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    host_root: Path = args.host_root
    node_name = args.node_name if args.node_name is not None else default_node_name(host_root)
    if args.command == "run":
        # The daemon's loop, grpc and pyudev are imported only for `run`.
        from agent.daemon.command import run_command  # noqa: PLC0415

        return run_command(args, node_name, PROG)
    try:
        report = inspect_node(
            host_root, node_name=node_name, now=datetime.datetime.now(datetime.UTC)
        )
    except HostRootError as error:
        print(f"{PROG}: {error.host_root}: {error.problem}", file=sys.stderr)
        return EXIT_BAD_HOST_ROOT
    sys.stdout.buffer.write(report.SerializeToString())
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
