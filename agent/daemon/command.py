"""`gpuctl-agent run`: logging, signals, exit status around the daemon's event loop.

Exit status: 0 after SIGTERM/SIGINT (stream closed, servers stopped); 2 for bad flags, an
unusable host root or a health port that cannot be bound; 1 for anything unexpected.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import signal
import sys
from pathlib import Path

from agent.daemon.flags import config_from_args
from agent.daemon.runner import AgentDaemon
from agent.daemon.uevents import UdevSource
from agent.hostroot import HostRootError, validate_host_root
from agent.inspect import inspect_node
from agent.sysfs_write import HostSysfsWriter
from gpuctl.common import json_logs
from gpuctl.common.build_version import gpuctl_version
from gpuctl.common.client_transport import ClientConfigError

EXIT_USAGE = 2
log = logging.getLogger("agent.daemon")


async def _run_until_signalled(daemon: AgentDaemon) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await daemon.run(stop)


def run_command(args: argparse.Namespace, node_name: str, prog: str) -> int:
    try:
        validate_host_root(args.host_root)
        config = config_from_args(args, node_name)
    except HostRootError as error:
        print(f"{prog}: {error.host_root}: {error.problem}", file=sys.stderr)
        return EXIT_USAGE
    except ClientConfigError as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return EXIT_USAGE
    if not node_name:
        print(f"{prog}: no node name: pass --node-name or set NODE_NAME", file=sys.stderr)
        return EXIT_USAGE
    # asyncio's debug chatter ("Using selector: EpollSelector") is not the agent's story.
    json_logs.configure(args.log_level, fixed={"node": node_name}, quiet=("asyncio",))
    host_root: Path = config.host_root
    daemon = AgentDaemon(
        config,
        inspect=lambda now: inspect_node(host_root, node_name=node_name, now=now),
        agent_version=gpuctl_version(),
        uniform=random.uniform,
        event_source=UdevSource if config.udev else None,
        writer=HostSysfsWriter(host_root) if config.allow_node_changes else None,
    )
    try:
        asyncio.run(_run_until_signalled(daemon))
    except OSError as error:
        log.error("cannot start", extra={"error": str(error)})
        return EXIT_USAGE
    return 0
