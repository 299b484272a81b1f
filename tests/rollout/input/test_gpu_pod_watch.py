"""The rollout reads GPU pods from the Pod watch, and lists them afresh before a KMM write
(or while the watch cannot be trusted); what the watch keeps of a Pod answers the GPU-pod
rule as the whole Pod does."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuctl.common.gpu_pods import is_gpu_pod
from gpuctl.rollout.input.gpu_pod_watch import concerns_rollout, pod_node, watched_part
from gpuctl.rollout.input.pod_facts import pod_facts
from tests.coordinator.rollout.test_controller import (
    DRIVER,
    LABELS,
    NODE_PATH,
    PODS_PATH,
    View,
    phase,
    target,
    world,
)

GPU_POD: dict[str, Any] = {
    "metadata": {"namespace": "ml", "name": "train", "resourceVersion": "7", "uid": "u1"},
    "spec": {
        "nodeName": "n1",
        "containers": [
            {
                "name": "c",
                "image": "train:1",
                "resources": {"limits": {"gpu.intel.com/xe": "1", "cpu": "2"}},
            }
        ],
    },
    "status": {"phase": "Running", "podIP": "10.0.0.1"},
}


def _pod(**spec: Any) -> dict[str, Any]:
    pod = copy.deepcopy(GPU_POD)
    pod["spec"] = {"nodeName": "n1", **spec}
    return pod


PODS = [
    GPU_POD,
    _pod(containers=[{"name": "c", "resources": {"requests": {"cpu": "1"}}}]),
    _pod(initContainers=[{"name": "i", "resources": {"requests": {"gpu.intel.com/i915": "1"}}}]),
    _pod(containers=[{"name": "c"}], resourceClaims=[{"name": "gpu", "resourceClaimName": "x"}]),
    {**_pod(containers=GPU_POD["spec"]["containers"]), "status": {"phase": "Succeeded"}},
    {"metadata": {"name": "bare", "namespace": "ns"}},
]


@pytest.mark.parametrize("pod", PODS)
@pytest.mark.parametrize("dra_served", [True, False])
def test_the_kept_part_answers_the_gpu_pod_rule_as_the_pod_does(
    pod: dict[str, Any], dra_served: bool
) -> None:
    kept = watched_part(pod)
    assert is_gpu_pod(kept, dra_served=dra_served) == is_gpu_pod(pod, dra_served=dra_served)
    assert pod_node(kept) == pod_node(pod)
    assert concerns_rollout(kept) == concerns_rollout(pod)


def test_the_kept_part_is_small() -> None:
    kept = watched_part(GPU_POD)
    assert kept == {
        "metadata": {"namespace": "ml", "name": "train", "resourceVersion": "7", "uid": "u1"},
        "spec": {
            "nodeName": "n1",
            "containers": [{"resources": {"limits": {"gpu.intel.com/xe": "1"}}}],
        },
        "status": {"phase": "Running", "conditions": []},
    }


XPUMANAGER: dict[str, Any] = {
    "metadata": {
        "namespace": "monitoring",
        "name": "xpumanager-7x2kq",
        "uid": "u2",
        "labels": {"app": "xpumanager"},
        "annotations": {"big": "x" * 1000},
        "ownerReferences": [
            {"kind": "Node", "name": "n1"},
            {"kind": "DaemonSet", "name": "xpumanager", "controller": True, "uid": "d1"},
        ],
    },
    "spec": {"nodeName": "n1", "containers": [{"name": "xpumd", "image": "xpumd:1"}]},
    "status": {
        "phase": "Running",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-03T00:00:00Z"},
        ],
    },
}


def test_a_daemon_pod_keeps_what_names_pauses_and_waits_for_it() -> None:
    """Its UID (the agent names it), labels (the pause's podSelector), its controller (the
    DaemonSet a paused pod comes back from) and its readiness; not its annotations."""
    kept = watched_part(XPUMANAGER)
    assert kept["metadata"] == {
        "namespace": "monitoring",
        "name": "xpumanager-7x2kq",
        "uid": "u2",
        "labels": {"app": "xpumanager"},
        "ownerReferences": [{"kind": "DaemonSet", "name": "xpumanager", "controller": True}],
    }
    assert kept["status"] == {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    facts = pod_facts(kept)
    assert facts == pod_facts(XPUMANAGER)
    assert facts.owner == "DaemonSet monitoring/xpumanager"
    assert facts.ready
    assert facts.daemon
    assert not facts.uses_gpu()
    assert concerns_rollout(kept)  # a daemon paused or back: the rollout looks


def _pod_lists(api: Any) -> int:
    return sum(1 for r in api.requests if r == ("GET", PODS_PATH))


def passes_with_a_trusted_empty_watch(
    api: Any, controller: Any, clock: Any, count: int, until: str = ""
) -> list[str]:
    """`count` passes (1.5 s apart, fewer once the node is in phase `until`) while the Pod
    watch says the node has no pods; the node's phase after each."""
    view = controller.gatherer.view
    assert isinstance(view, View)
    view.watched_pods = []
    seen = []
    for _ in range(count):
        controller.sync(DRIVER)
        seen.append(phase(api))
        if seen[-1] == until:
            break
        clock.advance(1.5)
    return seen


def test_with_a_trusted_watch_only_the_step_before_the_kmm_write_lists_pods() -> None:
    api, controller, clock = world()
    seen = passes_with_a_trusted_empty_watch(api, controller, clock, 12, until="Loading")
    assert "Draining" in seen
    assert seen[-1] == "Loading"
    assert 1 <= _pod_lists(api) <= seen.count("Preparing")


def test_a_gpu_pod_the_watch_missed_is_found_by_the_fresh_list_before_kmm_is_asked() -> None:
    """The watch says the node is empty; the API server lists a GPU pod on it. The node
    drains through the watch's word, and its fresh list takes it back to Draining instead of
    handing it to KMM."""
    api, controller, clock = world(pods=[GPU_POD])
    seen = passes_with_a_trusted_empty_watch(api, controller, clock, 20)
    assert "Preparing" in seen
    assert "Loading" not in seen
    assert api.objects[NODE_PATH]["metadata"]["labels"][LABELS.version] != target(api)
    assert _pod_lists(api) >= 1


def test_an_untrusted_watch_means_every_step_lists() -> None:
    api, controller, clock = world()
    # View.watched_pods stays None: the watch cannot be trusted (the image probe is listed)
    for _ in range(5):
        controller.sync(DRIVER)
        clock.advance(1.5)
    assert phase(api) in ("Draining", "Preparing")
    assert _pod_lists(api) >= 2  # Checking and Draining listed too


def test_a_finished_gpu_pod_still_concerns_the_rollout_and_a_cpu_pod_never_does() -> None:
    finished = {**GPU_POD, "status": {"phase": "Succeeded"}}
    assert not is_gpu_pod(finished)
    assert concerns_rollout(watched_part(finished))  # its finishing may end a drain
    assert not concerns_rollout(watched_part(PODS[1]))
