"""Test servers' ports come from below the kernel's ephemeral range, where no outgoing
connection or bind(0) can take them between their choice and the server's bind."""

from __future__ import annotations

import socket
from pathlib import Path

from testbed.harness import ports


def test_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    chosen = ports.free_loopback_ports(20)
    assert len(set(chosen)) == 20
    start = ports._ephemeral_start()
    assert all(ports.LOWEST <= port < start for port in chosen)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", chosen[0]))


def test_the_range_is_read_from_the_kernel_and_a_broken_file_means_the_default(
    tmp_path: Path,
) -> None:
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text("40000\t60999\n")
    assert ports._ephemeral_start(range_file) == 40_000
    range_file.write_text("garbage")
    assert ports._ephemeral_start(range_file) == ports.DEFAULT_EPHEMERAL_START
    assert ports._ephemeral_start(tmp_path / "missing") == ports.DEFAULT_EPHEMERAL_START


def test_ports_chosen_besides_earlier_ones_never_repeat_them() -> None:
    # Ports drawn earlier that nothing listens on yet are free to a second draw: `besides`
    # keeps it off them (KMM's webhook port and the webhook server's own metrics port once
    # came out the same, and the server could not bind).
    earlier = ports.free_loopback_ports(50)
    for _ in range(20):
        assert not set(ports.free_loopback_ports(50, besides=earlier)) & set(earlier)
    assert not set(ports._kernel_chosen(5, besides=earlier)) & set(earlier)


def test_no_port_is_handed_out_twice_in_one_process() -> None:
    # Servers of one test draw their ports in separate calls, and a port nothing listens on
    # yet binds freely: 2,000 ports drawn at random from ~22,000 would repeat one almost
    # surely (the birthday bound) were ports handed out not remembered.
    drawn = [port for _ in range(40) for port in ports.free_loopback_ports(50)]
    assert len(set(drawn)) == len(drawn)
