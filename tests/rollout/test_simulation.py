"""The pure decision, driven pass after pass through a simulated cluster (simulated_world).

Random worlds (busy nodes that free up later, VFs idle or handed to VMs, unreachable agents,
admin cordons, NotReady nodes, coordinator restarts that lose everything in memory) must
always end with every reachable, idle node Done at the target, and never: unload a busy
node, start a node beyond maxUnavailable, or lift an admin's cordon.
"""

from __future__ import annotations

import pytest

from gpuctl.common import names
from gpuctl.common.names import IN_PROGRESS, Phase
from gpuctl.rollout.input.facts import GpuPod
from tests.rollout.simulated_world import SimWorld, world
from tests.support.rollout_samples import KMM, TARGET


def phases(sim: SimWorld) -> dict[str, str]:
    return {name: n.labels.get(names.STATE_LABEL, "") for name, n in sim.nodes.items()}


def test_nodes_go_one_at_a_time_and_all_end_verified() -> None:
    sim = world(5, seed=1)
    labelled_at: dict[str, int] = {}
    for _ in range(200):
        sim.step()
        for name, node in sim.nodes.items():
            if node.labels.get(KMM.version) == TARGET:
                labelled_at.setdefault(name, sim.tick)
        in_progress = [n for n, p in phases(sim).items() if p not in ("Done", "Pending")]
        assert len(in_progress) <= 1, in_progress
    assert set(phases(sim).values()) == {"Done"}
    assert list(labelled_at) == sorted(labelled_at)  # in name order
    assert all(not n.unschedulable for n in sim.nodes.values())
    assert all(n.loaded == TARGET for n in sim.nodes.values())
    assert sim.violations == []


def test_a_busy_node_is_blocked_the_rest_proceed_and_it_finishes_once_free() -> None:
    sim = world(3, seed=2)
    sim.nodes["n01"].open_fd_pid = 4242
    sim.settle(120)
    assert phases(sim) == {"n00": "Done", "n01": "Blocked", "n02": "Done"}
    assert "pid 4242" in sim.nodes["n01"].annotations[names.REASON]
    assert not sim.nodes["n01"].unschedulable
    sim.nodes["n01"].open_fd_pid = None
    sim.settle(60)
    assert set(phases(sim).values()) == {"Done"}
    assert sim.violations == []


def test_idle_vfs_are_disabled_and_restored_vfs_of_a_vm_block() -> None:
    sim = world(2, seed=3, disable_idle_vfs=True)
    sim.nodes["n00"].vfs = 4
    sim.nodes["n01"].vfs = 2
    sim.nodes["n01"].vfs_to_vm = True
    sim.settle(120)
    assert phases(sim) == {"n00": "Done", "n01": "Blocked"}
    assert sim.nodes["n00"].vfs == 4
    assert names.PREPARE_CHANGES not in sim.nodes["n00"].annotations
    assert sim.nodes["n01"].loaded != TARGET
    assert sim.violations == []


def test_an_admin_cordon_counts_against_the_bound_and_survives_the_rollout() -> None:
    stalled = world(3, seed=4)
    stalled.nodes["n02"].unschedulable = True
    stalled.settle(100)
    # The admin's cordoned node goes first (it costs no extra slot), then holds the only one.
    assert phases(stalled) == {"n00": "Pending", "n01": "Pending", "n02": "Done"}
    decision = stalled.step()
    assert decision.status is not None
    assert "already unavailable: n02 (cordoned)" in decision.status["message"]
    sim = world(3, seed=4, max_unavailable=2)
    sim.nodes["n02"].unschedulable = True
    sim.settle(150)
    assert set(phases(sim).values()) == {"Done"}
    assert sim.nodes["n02"].unschedulable
    assert not sim.nodes["n00"].unschedulable
    assert sim.violations == []


@pytest.mark.parametrize("seed", range(40))
def test_random_worlds_with_restarts_keep_every_invariant(seed: int) -> None:
    sim = world(6, seed=seed, disable_idle_vfs=True, evict_gpu_pods=True, max_unavailable=2)
    rng = sim.rng
    admin: set[str] = set()
    for sim_node in sim.nodes.values():
        roll = rng.random()
        if roll < 0.2:
            sim_node.open_fd_pid = rng.randint(100, 9999)
        elif roll < 0.4:
            sim_node.vfs = rng.randint(1, 4)
        elif roll < 0.5:
            sim_node.pods.append(GpuPod("ml", sim_node.name))
        elif roll < 0.6 and not admin:  # two would hold both of maxUnavailable's slots
            sim_node.unschedulable = True
            admin.add(sim_node.name)
        elif roll < 0.7:
            sim_node.agent_up = False
    for tick in range(400):
        if rng.random() < 0.05:
            sim.restart()
        if tick == 150:  # every obstacle goes away
            for sim_node in sim.nodes.values():
                sim_node.open_fd_pid = None
                sim_node.agent_up = True
        sim.step()
        for name in admin:
            assert sim.nodes[name].unschedulable, f"admin cordon of {name} lifted"
    assert sim.violations == []
    assert set(phases(sim).values()) == {Phase.DONE.value}, phases(sim)
    for name, sim_node in sim.nodes.items():
        assert sim_node.loaded == TARGET
        assert sim_node.unschedulable == (name in admin)


NEXT = "v8.0.0.1_261201.1-12345678"


def left(sim: SimWorld, name: str) -> bool:
    """The node left the rollout: no state, no target, driver unloaded, not cordoned by us."""
    node = sim.nodes[name]
    return (
        names.STATE_LABEL not in node.labels
        and names.TARGET_LABEL not in node.labels
        and node.loaded is None
        and not any(k.startswith("gpuctl.dev/") for k in node.annotations)
    )


def test_nodes_no_longer_wanted_are_unloaded_one_at_a_time_and_a_busy_one_waits() -> None:
    sim = world(4, seed=5)
    sim.settle(150)
    assert set(phases(sim).values()) == {"Done"}
    sim.wanted = {"n00", "n01"}
    sim.nodes["n03"].open_fd_pid = 4242
    for _ in range(150):
        sim.step()
        in_progress = [n for n, p in phases(sim).items() if p in IN_PROGRESS]
        assert len(in_progress) <= 1, in_progress
    assert left(sim, "n02")
    assert not sim.nodes["n02"].unschedulable
    assert phases(sim)["n03"] == "Blocked"
    assert sim.nodes["n03"].annotations[names.STATE_VERSION] == names.REMOVAL_VERSION
    assert "pid 4242" in sim.nodes["n03"].annotations[names.REASON]
    assert sim.nodes["n03"].loaded == TARGET
    sim.nodes["n03"].open_fd_pid = None
    sim.settle(60)
    assert left(sim, "n03")
    assert {n: phases(sim)[n] for n in ("n00", "n01")} == {"n00": "Done", "n01": "Done"}
    assert sim.violations == []


def test_without_a_target_every_node_is_unloaded() -> None:
    sim = world(3, seed=6)
    sim.settle(100)
    sim.target = None
    sim.settle(100)
    assert all(left(sim, name) for name in sim.nodes)
    assert sim.violations == []


@pytest.mark.parametrize("seed", range(30))
def test_targets_and_wanted_nodes_changing_mid_rollout_strand_no_node(seed: int) -> None:
    sim = world(5, seed=seed, disable_idle_vfs=True, evict_gpu_pods=True, max_unavailable=2)
    rng = sim.rng
    for sim_node in sim.nodes.values():
        if rng.random() < 0.3:
            sim_node.open_fd_pid = rng.randint(100, 9999)
        elif rng.random() < 0.3:
            sim_node.vfs = rng.randint(1, 4)
    for tick in range(500):
        if tick < 200 and rng.random() < 0.04:
            sim.target = rng.choice([TARGET, NEXT])
        if tick < 200 and rng.random() < 0.04:
            sim.wanted = {n for n in sim.nodes if rng.random() < 0.7}
        if rng.random() < 0.03:
            sim.restart()
        if tick == 200:
            for sim_node in sim.nodes.values():
                sim_node.open_fd_pid = None
        sim.step()
    assert sim.violations == []
    wanted = sim.wanted if sim.wanted is not None else set(sim.nodes)
    for name, sim_node in sim.nodes.items():
        if name in wanted:
            assert phases(sim)[name] == "Done", (name, phases(sim))
            assert sim_node.annotations[names.STATE_VERSION] == sim.target
            assert sim_node.loaded == sim.target
            assert not sim_node.unschedulable
        else:
            assert left(sim, name), (name, sim_node.labels, sim_node.annotations)
            assert not sim_node.unschedulable
