"""The rollout's drain against a real PodDisruptionBudget, on kwok nodes.

Three kwok nodes with one GPU each (``gpu.intel.com/xe``) run a Deployment of three GPU Pods,
one per node, placed by kube-scheduler and run by kwok; a PodDisruptionBudget covers them.
The rollout (``evictGPUPods: true``, ``maxUnavailable: 1``) cordons the first node and asks the
Eviction API for its Pod: the disruption controller's budget refuses it with 429 and the node
waits in Draining. Once the budget allows, the eviction goes through, the Deployment's
ReplicaSet replaces the Pod, the scheduler places the replacement on whichever node has a
free GPU (the first node, once the rollout uncordons it), and every node ends verified.
"""

from __future__ import annotations

import datetime
import itertools
import json
from pathlib import Path

import pytest

from gpuctl.rollout.step.writes import EVICT_RETRY_SECONDS
from testbed.cluster_api import TEST_LABEL
from testbed.harness.waiting import wait_until
from testbed.kwok_nodes import (
    budget_status,
    disruption_budget,
    give_gpus,
    gpu_deployment,
    pods_by_node,
    set_min_available,
    workload_pods,
)
from testbed.rollout_live.images import NEW
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import FAST, TIMEOUTS, module_version, start, wait_complete

pytestmark = pytest.mark.integration

WORKLOAD = "train"
REFUSED = "eviction refused by a PodDisruptionBudget; retrying"


def _refusals(log: Path, node: str) -> list[float]:
    """When (epoch seconds, from the coordinator's JSON log) an eviction of the node's pods
    was refused."""
    times = []
    for line in log.read_text(errors="replace").splitlines():
        if REFUSED in line:
            record = json.loads(line)
            if record.get("node") == node:
                times.append(datetime.datetime.fromisoformat(record["time"]).timestamp())
    return times


def test_the_drain_meets_a_real_budget_waits_and_goes_on_when_it_allows(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    settings = {
        **FAST,
        "maxUnavailable": 1,
        "evictGPUPods": True,
        "timeouts": {**TIMEOUTS, "drain": "300s"},
    }
    nodes = start(rig, ["n1", "n2", "n3"], settings)
    first, *_ = nodes
    for node in nodes:
        give_gpus(rig.kube, node, 1)
    gpu_deployment(
        rig.kube, rig.namespace, WORKLOAD, replicas=3, node_selector={TEST_LABEL: rig.namespace}
    )
    disruption_budget(rig.kube, rig.namespace, WORKLOAD, min_available=3)

    def one_per_node() -> dict[str, str] | None:
        placed = pods_by_node(workload_pods(rig.kube, rig.namespace, WORKLOAD))
        return placed if sorted(placed.values()) == sorted(nodes) else None

    before = wait_until("a Running, Ready GPU pod on every node", one_per_node, 120)
    wait_until(
        "the budget counts three healthy pods and allows no disruption",
        lambda: budget_status(rig.kube, rig.namespace, WORKLOAD).get("currentHealthy") == 3,
        60,
    )
    assert budget_status(rig.kube, rig.namespace, WORKLOAD)["disruptionsAllowed"] == 0
    log = rig.folder / "coordinator.log"

    rig.set_version(NEW)
    wait_until("the first node's eviction is refused (429)", lambda: _refusals(log, first), 90)
    # It waits: still Draining, cordoned, its pod still running there; the others wait for
    # the one slot of maxUnavailable.
    wait_until("a second refusal", lambda: _refusals(log, first)[1:], 60)
    assert rig.phase(first) == "Draining"
    assert rig.node(first)["spec"].get("unschedulable") is True
    pod_on_first = next(pod for pod, node in before.items() if node == first)
    assert pod_on_first in pods_by_node(workload_pods(rig.kube, rig.namespace, WORKLOAD))
    # The others wait as they were, Done at the old version (no write until their turn).
    assert [rig.phase(n) for n in nodes[1:]] == ["Done", "Done"]
    assert module_version(rig, first) != NEW
    # Asked again no sooner than the retry interval, however many passes ran meanwhile.
    refused = _refusals(log, first)
    gaps = [b - a for a, b in itertools.pairwise(refused)]
    assert min(gaps) >= EVICT_RETRY_SECONDS - 0.05, gaps

    set_min_available(rig.kube, rig.namespace, WORKLOAD, 2)
    rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=240)
    assert [module_version(rig, node) for node in nodes] == [NEW, NEW, NEW]
    wait_complete(rig)

    # Every original pod was evicted and replaced by the ReplicaSet; the replacements run one
    # per node again (the scheduler put each on the GPU its eviction freed, once uncordoned).
    after = wait_until("three replacement pods, one per node", one_per_node, 120)
    assert not set(after) & set(before)
    assert all(not rig.node(node)["spec"].get("unschedulable") for node in nodes)
    assert rig.kernels.violations == []
