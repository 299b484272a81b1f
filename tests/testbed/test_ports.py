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


def test_each_xdist_worker_draws_from_its_own_slice_of_the_range() -> None:
    def slice_of(worker: str, count: str) -> tuple[int, int]:
        return ports.draw_range(
            32_768, {"PYTEST_XDIST_WORKER": worker, "PYTEST_XDIST_WORKER_COUNT": count}
        )

    first, second = slice_of("gw0", "2"), slice_of("gw1", "2")
    assert first == (ports.LOWEST, ports.LOWEST + (32_768 - ports.LOWEST) // 2)
    assert second[0] == first[1]  # side by side, not overlapping
    assert second[1] <= 32_768
    assert ports.draw_range(32_768, {}) == (ports.LOWEST, 32_768)  # no worker: all of it
    assert slice_of("gw2", "2") == (ports.LOWEST, 32_768)  # nonsense: all of it
    assert slice_of("master", "2") == (ports.LOWEST, 32_768)
