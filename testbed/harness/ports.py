"""Free TCP ports on loopback for test servers, chosen below the kernel's ephemeral range.

A port the kernel hands out for "any port" (bind to 0) comes from the ephemeral range
(``net.ipv4.ip_local_port_range``), as does the local port of every outgoing connection:
between our release of such a port and the server's bind, any connection on the machine (an
API client, another test suite) may take it, and the server fails with "address in use".
Below that range the kernel never hands a port out on its own, so a port found free there
stays free unless another process picks the same one on purpose: ports are drawn at random
from it (and checked by binding). Within one process a port is never handed out twice (until
half the range is used up): a port drawn for a server that is not listening yet binds
freely, so two draws in one test could otherwise pick it twice (seen in CI: KMM's webhook
metrics port drawn again for another server of the same test, "bind: address already in
use"; with ~10 ports per test and ~100 tests a run, such a coincidence is a run in five).
Processes that run tests side by side (pytest-xdist's workers, which say so in
``PYTEST_XDIST_WORKER=gwN`` and ``PYTEST_XDIST_WORKER_COUNT``) each draw from their own slice
of that range, so no two of them pick one port between its draw and its server's bind.
"""

from __future__ import annotations

import os
import random
import socket
import threading
from collections.abc import Collection, Mapping
from pathlib import Path

from testbed.harness.layout import LOOPBACK, Ports

LOWEST = 10_000  # below: well-known and registered services' ports
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL_START = 32_768

_draw = random.SystemRandom()
# Every port this process has handed out (free_loopback_ports), so none is handed out twice.
_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()


def _ephemeral_start(range_file: Path = EPHEMERAL_RANGE) -> int:
    try:
        return int(range_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_START


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def _kernel_chosen(count: int, besides: Collection[int]) -> list[int]:
    """The fallback where no range lies below the ephemeral one: ports bind(0) gives."""
    sockets: list[socket.socket] = []
    try:
        while len(sockets) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            if sock.getsockname()[1] in besides:
                sock.close()
                continue
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def draw_range(ephemeral_start: int, environ: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """The ports ``[low, high)`` this process draws from: all of ``[LOWEST, ephemeral_start)``,
    or its own slice of it under a pytest-xdist worker (``gw0`` the first of
    ``PYTEST_XDIST_WORKER_COUNT``)."""
    worker, workers = (
        environ.get("PYTEST_XDIST_WORKER", ""),
        environ.get("PYTEST_XDIST_WORKER_COUNT", ""),
    )
    if not (worker.startswith("gw") and worker[2:].isdigit() and workers.isdigit()):
        return LOWEST, ephemeral_start
    index, total = int(worker[2:]), int(workers)
    if total < 1 or index >= total:
        return LOWEST, ephemeral_start
    width = (ephemeral_start - LOWEST) // total
    return LOWEST + index * width, LOWEST + (index + 1) * width


def free_loopback_ports(count: int, *, besides: Collection[int] = ()) -> list[int]:
    """``count`` distinct ports, free on 127.0.0.1 a moment ago, that the kernel does not hand
    out to other sockets on its own, and none of ``besides``: ports chosen earlier that
    nothing listens on yet (two draws may otherwise pick the same free port)."""
    low, top = draw_range(_ephemeral_start())
    if top - low < count * 100:
        return _kernel_chosen(count, besides)
    chosen: list[int] = []
    with _handed_out_lock:
        if len(_handed_out) > (top - low) // 2:
            _handed_out.clear()  # the oldest servers are long gone; start over
        while len(chosen) < count:
            port = _draw.randrange(low, top)
            taken = port in chosen or port in besides or port in _handed_out
            if not taken and _bindable(port):
                chosen.append(port)
        _handed_out.update(chosen)
    return chosen


def pick_ports() -> Ports:
    """Ports for a new control plane."""
    etcd_client, etcd_peer, apiserver, controller_manager = free_loopback_ports(4)
    return Ports(etcd_client, etcd_peer, apiserver, controller_manager)
