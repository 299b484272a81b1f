"""Free TCP ports on loopback, asked from the kernel (bind to port 0, then release)."""

from __future__ import annotations

import socket

from tests.harness.layout import LOOPBACK, Ports


def free_loopback_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free on 127.0.0.1 a moment ago."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def pick_ports() -> Ports:
    """Ports for a new control plane."""
    etcd_client, etcd_peer, apiserver, controller_manager = free_loopback_ports(4)
    return Ports(etcd_client, etcd_peer, apiserver, controller_manager)
