"""Property-based tests of the rollout decision (Hypothesis): random clusters, random event
orders, driven pass after pass through the simulated world (simulated_world.py).

Invariants, whatever the cluster and the order of events:
- no KMM write and no unload on a busy node (the world records both as violations);
- no node started beyond maxUnavailable, and never more nodes in progress than it allows;
- a node whose agent never answers (unknown) is never unloaded;
- an admin's cordon is never lifted;
and a cluster whose obstacles all go away converges: every node Done at the target, loaded,
uncordoned (unless an admin cordoned it) — after the admin retries the nodes that Failed (with
a reason) while an obstacle was there, as `gpuctl rollout retry` does.

Examples per test: the `ci` profile (default) keeps the suite quick and deterministic (the same
examples every run: a random one found in CI would be a flaky test, not a finding);
HYPOTHESIS_PROFILE=long runs many more, randomly
(`.venv/bin/python -m pytest tests/rollout/test_decide_properties.py`). What a long run finds
is kept below as an explicit example.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuctl.common import names
from gpuctl.common.names import IN_PROGRESS, Phase
from gpuctl.rollout.input.facts import GpuPod
from gpuctl.rollout.input.settings import max_unavailable
from tests.rollout.simulated_world import SimNode, SimWorld, world
from tests.support.rollout_samples import TARGET

settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

IN_PROGRESS_VALUES = {p.value for p in IN_PROGRESS}
# Events that make a node busy or unavailable, and their opposites.
EVENTS = (
    "open_fd",
    "close_fd",
    "vfs_on",
    "vfs_off",
    "pod",
    "agent_down",
    "agent_up",
    "not_ready",
    "ready",
    "restart",
)
SETTLE_TICKS = 250


@dataclass(frozen=True)
class NodeStart:
    busy: str  # "", "fd", "vfs", "vm", "pod"
    agent_up: bool
    ready: bool


node_starts = st.builds(
    NodeStart,
    busy=st.sampled_from(["", "", "fd", "vfs", "vm", "pod"]),
    agent_up=st.booleans(),
    ready=st.booleans(),
)
events = st.lists(
    st.tuples(st.integers(0, 150), st.sampled_from(EVENTS), st.integers(0, 7)), max_size=40
)


def make_world(starts: list[NodeStart], max_unavail: int | str) -> SimWorld:
    sim = world(
        len(starts),
        seed=0,
        disable_idle_vfs=True,
        evict_gpu_pods=True,
        max_unavailable=max_unavail,
    )
    for node, start in zip(sim.nodes.values(), starts, strict=True):
        apply_start(node, start)
    return sim


def apply_start(node: SimNode, start: NodeStart) -> None:
    if start.busy == "fd":
        node.open_fd_pid = 4242
    elif start.busy in ("vfs", "vm"):
        node.vfs = 2
        node.vfs_to_vm = start.busy == "vm"
    elif start.busy == "pod":
        node.pods.append(GpuPod("ml", node.name))
    node.agent_up = start.agent_up
    node.ready = start.ready


def apply_event(sim: SimWorld, kind: str, index: int) -> None:
    node = list(sim.nodes.values())[index % len(sim.nodes)]
    if kind == "open_fd":
        node.open_fd_pid = 4243
    elif kind == "close_fd":
        node.open_fd_pid = None
    elif kind == "vfs_on":
        node.vfs = 2
    elif kind == "vfs_off":
        node.vfs = 0
    elif kind == "pod":
        node.pods.append(GpuPod("ml", node.name))
    elif kind == "agent_down":
        node.agent_up = False
    elif kind == "agent_up":
        node.agent_up = True
    elif kind == "not_ready":
        node.ready = False
    elif kind == "ready":
        node.ready = True
    elif kind == "restart":
        sim.restart()


def in_progress(sim: SimWorld) -> int:
    return sum(
        1 for n in sim.nodes.values() if n.labels.get(names.STATE_LABEL) in IN_PROGRESS_VALUES
    )


def step_checking(sim: SimWorld, bound: int, never_known: set[str]) -> None:
    loaded_before = {name: n.loaded for name, n in sim.nodes.items()}
    sim.step()
    assert sim.violations == []
    assert in_progress(sim) <= bound
    for name in never_known:
        assert sim.nodes[name].loaded == loaded_before[name], f"{name} unloaded while unknown"


def make_idle(sim: SimWorld) -> None:
    for node in sim.nodes.values():
        node.open_fd_pid = None
        node.vfs = 0
        node.vfs_to_vm = False
        node.pods.clear()
        node.agent_up = True
        node.ready = True


max_unavailables = st.one_of(st.integers(1, 3), st.sampled_from(["25%", "50%", "100%"]))


@given(
    starts=st.lists(node_starts, min_size=1, max_size=8),
    max_unavail=max_unavailables,
    schedule=events,
)
def test_invariants_hold_and_the_cluster_converges_once_idle(
    starts: list[NodeStart], max_unavail: int | str, schedule: list[tuple[int, str, int]]
) -> None:
    invariants_hold_and_the_cluster_converges(starts, max_unavail, schedule)


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="what remains of the gap between the check and KMM (issue 'Twelve ways a busy node "
    "can still lose its driver', item 8): this simulation's KMM unloads at the instant of the "
    "write, so a device opened between the agent's prepare answer and the write is unloaded; "
    "real KMM's worker takes seconds, in which worker_hold.py holds it off "
    "(docs/rollout.md#opened-after-the-check); found by a random run on 2026-12-02",
)
def test_a_device_opened_between_the_prepare_answer_and_the_kmm_write() -> None:
    idle_unknown = NodeStart("", agent_up=False, ready=False)
    starts = [idle_unknown, idle_unknown, NodeStart("pod", agent_up=True, ready=True)]
    invariants_hold_and_the_cluster_converges(starts, 3, [(7, "open_fd", 2)])


def invariants_hold_and_the_cluster_converges(
    starts: list[NodeStart], max_unavail: int | str, schedule: list[tuple[int, str, int]]
) -> None:
    sim = make_world(starts, max_unavail)
    bound = max_unavailable(max_unavail, len(starts))
    # Agents that are down from the start and never come back: their nodes stay unknown.
    revived = {i % len(starts) for _, kind, i in schedule if kind == "agent_up"}
    never_known = {
        name
        for i, (name, node) in enumerate(sim.nodes.items())
        if not node.agent_up and i not in revived
    }
    by_tick: dict[int, list[tuple[str, int]]] = {}
    for tick, kind, index in schedule:
        by_tick.setdefault(tick, []).append((kind, index))
    for tick in range(151):
        for kind, index in by_tick.get(tick, []):
            apply_event(sim, kind, index)
        step_checking(sim, bound, never_known)
    make_idle(sim)
    for _ in range(SETTLE_TICKS):
        step_checking(sim, bound, set())
    # A node whose step failed while its agent was away is Failed by design, with its reason;
    # the admin retries it (what `gpuctl rollout retry --node NODE` writes), and then it converges.
    for node in sim.nodes.values():
        if node.labels.get(names.STATE_LABEL) == Phase.FAILED.value:
            assert node.annotations.get(names.REASON), node.name
            node.labels[names.STATE_LABEL] = Phase.PENDING.value
            node.annotations.pop(names.REASON, None)
    for _ in range(SETTLE_TICKS):
        step_checking(sim, bound, set())
    phases = {n: s.labels.get(names.STATE_LABEL) for n, s in sim.nodes.items()}
    assert set(phases.values()) == {Phase.DONE.value}, phases
    assert all(node.loaded == TARGET for node in sim.nodes.values())
    assert not any(node.unschedulable for node in sim.nodes.values())


@given(
    count=st.integers(1, 10),
    max_unavail=max_unavailables,
    restarts=st.sets(st.integers(0, 100), max_size=10),
)
def test_an_idle_cluster_converges_within_bounded_passes(
    count: int, max_unavail: int | str, restarts: set[int]
) -> None:
    sim = make_world([NodeStart("", True, True)] * count, max_unavail)
    bound = max_unavailable(max_unavail, count)
    for tick in range(SETTLE_TICKS):
        if tick in restarts:
            sim.restart()
        step_checking(sim, bound, set())
    assert {s.labels.get(names.STATE_LABEL) for s in sim.nodes.values()} == {Phase.DONE.value}
    assert all(node.loaded == TARGET for node in sim.nodes.values())
