"""A GPUNode turns stale when its record crosses the freshness bound, and fresh again when the
agent is heard from: exactly one write each, at the right moment, driven by a manual clock.
"""

from __future__ import annotations

from typing import Any

from coordinator.live_nodes.gpunodes.mirror import GPUNodeMirror
from coordinator.live_nodes.streams.registry import Registry
from testbed.agent_client import OPEN_CLIENTS, sample_report
from tests.support.clock import ManualClock
from tests.support.memory_api import MemoryApi

GPUNODES = "/apis/gpuctl.dev/v1alpha1/gpunodes"
BOUND = 6.0


class World:
    """A registry, its mirror and the in-memory API server, on one manual clock."""

    def __init__(self, nodes: int = 1, *, restarting: World | None = None) -> None:
        """A coordinator; with `restarting`, the one after it, on its API server and clock."""
        self.clock: ManualClock = restarting.clock if restarting else ManualClock()
        self.api: MemoryApi = restarting.api if restarting else MemoryApi()
        self.names = [f"gpu-{i}" for i in range(nodes)]
        for name in self.names:
            self.api.objects[f"/api/v1/nodes/{name}"] = {"metadata": {"name": name, "uid": name}}
        self.registry = Registry(self.clock, self.clock.wall)
        self.mirror = GPUNodeMirror(
            self.api,
            self.registry,
            monotonic=self.clock,
            wall_clock=self.clock.wall,
            freshness_seconds=BOUND,
        )

    def connect_and_report(self, node: str) -> None:
        self.registry.connected(node, 1, "v1", "boot")
        self.registry.reported(node, 1, sample_report(node, (OPEN_CLIENTS,)), 1)

    def heartbeat(self, node: str) -> None:
        self.registry.heard(node, 1, 1)

    def tick(self, seconds: float) -> None:
        """Time passes; the timer and a writer do what is due by then."""
        self.clock.advance(seconds)
        self.mirror.check_deadlines()
        self.mirror.write_due()

    def status_patches(self, node: str) -> list[dict[str, Any]]:
        target = ("PATCH", f"{GPUNODES}/{node}/status")
        return [
            b["status"]
            for w, b in zip(self.api.writes, self.api.bodies, strict=True)
            if w == target
        ]

    def status(self, node: str) -> dict[str, Any]:
        return dict(self.api.objects[f"{GPUNODES}/{node}"]["status"])


def _fresh(status: dict[str, Any]) -> tuple[str, str]:
    (condition,) = status["conditions"]
    return (condition["status"], condition["reason"])


def test_a_silent_node_is_written_stale_once_just_after_the_bound() -> None:
    world = World()
    world.connect_and_report("gpu-0")
    world.mirror.write_due()
    assert _fresh(world.status("gpu-0")) == ("True", "AgentHeard")
    assert world.status("gpu-0")["unloadBlockers"] == "1"
    assert world.mirror.deadlines.armed_at("gpu-0") == world.clock() + BOUND
    writes = len(world.api.writes)

    world.tick(BOUND)  # exactly the bound: still fresh (stale means silent for longer)
    assert len(world.api.writes) == writes
    world.tick(0.1)
    assert len(world.api.writes) == writes + 1
    (patch,) = world.status_patches("gpu-0")[1:]
    assert set(patch) == {"conditions", "unloadBlockers"}
    assert patch["unloadBlockers"] == "unknown"
    (condition,) = patch["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", "NoHeartbeat")
    assert condition["message"] == (
        "no heartbeat or report from the agent for 6.1s (the freshness bound is 6s): "
        "the node's state is unknown"
    )
    assert condition["lastTransitionTime"] == "2026-11-29T23:16:46.100000Z"
    assert world.status("gpu-0")["session"] == "Connected"  # the stream is open, yet silent
    assert world.status("gpu-0")["summary"]["blockers"] == 1  # the report's words are kept

    for _ in range(10):  # staying silent writes nothing more, and nothing stays armed
        world.tick(BOUND)
    assert len(world.api.writes) == writes + 1
    assert len(world.mirror.deadlines) == 0


def test_heartbeats_keep_it_fresh_without_writes_and_move_the_wake_up() -> None:
    world = World()
    world.connect_and_report("gpu-0")
    world.mirror.write_due()
    writes = len(world.api.writes)
    for _ in range(20):
        world.tick(BOUND / 3)
        world.heartbeat("gpu-0")
    assert len(world.api.writes) == writes
    assert world.mirror.deadlines.armed_at("gpu-0") is not None
    world.tick(BOUND + 0.1)
    assert _fresh(world.status("gpu-0")) == ("False", "NoHeartbeat")
    assert len(world.api.writes) == writes + 1


def test_heard_again_it_is_written_fresh_once_and_watched_again() -> None:
    world = World()
    world.connect_and_report("gpu-0")
    world.mirror.write_due()
    world.tick(BOUND + 1)
    assert _fresh(world.status("gpu-0")) == ("False", "NoHeartbeat")
    writes = len(world.api.writes)

    world.heartbeat("gpu-0")  # SIGCONT: the agent speaks again
    world.heartbeat("gpu-0")
    world.mirror.write_due()
    assert len(world.api.writes) == writes  # its last write was just now: coalescing waits
    world.tick(1.0)  # the mirror's min_interval
    assert len(world.api.writes) == writes + 1
    assert _fresh(world.status("gpu-0")) == ("True", "AgentHeard")
    assert world.status("gpu-0")["unloadBlockers"] == "1"
    world.tick(BOUND / 2)
    world.heartbeat("gpu-0")
    assert len(world.api.writes) == writes + 1
    world.tick(BOUND + 0.1)  # and silent again: stale again
    assert _fresh(world.status("gpu-0")) == ("False", "NoHeartbeat")
    assert len(world.api.writes) == writes + 2


def test_a_dropped_report_is_written_as_superseded_then_fresh_with_the_next_report() -> None:
    world = World()
    world.connect_and_report("gpu-0")
    world.mirror.write_due()
    world.clock.advance(2)
    world.registry.dropped("gpu-0", 1)  # the rate limit refused the agent's newer report
    world.mirror.write_due()
    assert _fresh(world.status("gpu-0")) == ("False", "ReportSuperseded")
    assert world.status("gpu-0")["unloadBlockers"] == "unknown"
    world.clock.advance(2)
    world.registry.reported("gpu-0", 1, sample_report("gpu-0"), 3)
    world.mirror.write_due()
    assert _fresh(world.status("gpu-0")) == ("True", "AgentHeard")
    assert world.status("gpu-0")["unloadBlockers"] == "0"


def test_a_disconnected_node_goes_stale_when_its_last_word_is_older_than_the_bound() -> None:
    world = World()
    world.connect_and_report("gpu-0")
    world.mirror.write_due()
    world.clock.advance(2)
    world.registry.disconnected("gpu-0", 1)
    world.mirror.write_due()
    assert world.status("gpu-0")["session"] == "Disconnected"
    assert _fresh(world.status("gpu-0")) == ("True", "AgentHeard")  # as the guard sees it
    world.tick(BOUND - 2)
    assert _fresh(world.status("gpu-0")) == ("True", "AgentHeard")
    world.tick(0.1)
    assert _fresh(world.status("gpu-0")) == ("False", "NoHeartbeat")


def test_two_thousand_silent_nodes_are_one_write_each() -> None:
    world = World(nodes=2000)
    for name in world.names:
        world.connect_and_report(name)
    world.mirror.write_due()
    assert len(world.api.writes) == 2 * 2000  # create + status each
    writes = len(world.api.writes)

    talking = world.names[::2]
    world.tick(BOUND - 1)
    for name in talking:
        world.heartbeat(name)
    world.tick(1.5)  # only the silent half crossed the bound
    assert len(world.api.writes) == writes + 1000
    world.tick(BOUND)  # now the other half too
    assert len(world.api.writes) == writes + 2000
    for _ in range(5):
        world.tick(BOUND)
    assert len(world.api.writes) == writes + 2000
    for name in world.names:
        assert len(world.status_patches(name)) == 2  # fresh, then stale: one write each
        assert _fresh(world.status(name)) == ("False", "NoHeartbeat")


def test_a_new_stream_and_its_first_report_are_one_write() -> None:
    world = World()
    world.registry.connected("gpu-0", 1, "v1", "boot")
    world.mirror.write_due()
    assert world.api.writes == []  # waits a moment for the stream's first report
    world.clock.advance(0.2)
    world.registry.reported("gpu-0", 1, sample_report("gpu-0"), 1)
    world.mirror.write_due()
    assert len(world.status_patches("gpu-0")) == 1
    status = world.status("gpu-0")
    assert (status["session"], _fresh(status), status["unloadBlockers"]) == (
        "Connected",
        ("True", "AgentHeard"),
        "0",
    )


def test_a_stream_that_does_not_report_is_written_unknown_after_the_grace() -> None:
    world = World()
    world.registry.connected("gpu-0", 1, "v1", "boot")
    world.tick(1.0)
    assert world.api.writes == []
    world.tick(1.1)
    assert _fresh(world.status("gpu-0")) == ("False", "NoReport")
    assert world.status("gpu-0")["unloadBlockers"] == "unknown"


def test_a_restarted_coordinator_rewrites_nothing_current() -> None:
    world = World()
    world.connect_and_report("gpu-0")
    world.mirror.write_due()
    writes = len(world.api.writes)

    world = World(restarting=world)
    world.mirror.observed("ADDED", world.api.objects[f"{GPUNODES}/gpu-0"])  # its watch lists
    world.clock.advance(30)  # a new leader, later; the agent reconnects and reports the same
    world.connect_and_report("gpu-0")
    world.mirror.write_due()
    world.tick(BOUND / 2)
    world.heartbeat("gpu-0")
    world.tick(BOUND / 2)
    assert len(world.api.writes) == writes
