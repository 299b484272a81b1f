"""A rollout refused mid-step finishes the step it began: no node is left half way.

The issue "Twelve ways a busy node can still lose its driver", item 12, on KMM's own
operator: a node of the rig's GPUDriver is mid-step (cordoned, waiting in Draining for a GPU
pod to go) when an older GPUDriver's selector is changed to overlap the rig's, which turns
the rig's GPUDriver into a conflict. Before, its rollout simply stopped: the node stayed
cordoned in Draining for ever. Now the refused rollout is Paused naming the node it is still
finishing, the node's step goes on through every check (the pod leaves, then the fresh agent
answer, KMM, verification) to Done and uncordoned, and nothing else starts.
"""

from __future__ import annotations

import contextlib

import pytest

from coordinator.kube.client import MERGE_PATCH, KubeError, path
from gpuctl.common import names
from testbed.cluster_api import TEST_LABEL, gpudriver
from testbed.rollout_live.images import NEW, OLD, kernel_mappings
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import (
    FAST,
    TIMEOUTS,
    gpu_pod,
    module_version,
    start,
    wait_status,
)

pytestmark = pytest.mark.integration

# Sorts before the rig's "gpu": the older of the two even when made in the same second.
RIVAL = "fleet"
RIVAL_PATH = path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL, name=RIVAL)
LONG_DRAIN = {**FAST, "timeouts": {**TIMEOUTS, "drain": "600s"}}


def create_rival(rig: RolloutRig, selector: dict[str, str]) -> None:
    spec = {
        "nodeSelector": selector,
        "kernelModule": {"version": OLD, "kernelMappings": kernel_mappings(OLD)},
    }
    rig.kube.request(
        "POST",
        path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL),
        body=gpudriver(RIVAL, rig.namespace, spec),
    )


def remove_rival(rig: RolloutRig) -> None:
    with contextlib.suppress(KubeError):
        rig.kube.request("DELETE", RIVAL_PATH)
    with contextlib.suppress(KubeError):
        rig.kube.request(
            "PATCH", RIVAL_PATH, body={"metadata": {"finalizers": None}}, content_type=MERGE_PATCH
        )


def test_a_node_mid_step_finishes_it_when_its_gpudriver_turns_into_a_conflict(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    # Disjoint from the rig's selector ({TEST_LABEL: <namespace>}) at first: no conflict.
    create_rival(rig, {TEST_LABEL: f"{rig.namespace}-rival"})
    try:
        (node,) = start(rig, ["a"], LONG_DRAIN)
        pod = gpu_pod(rig, node)
        rig.set_version(NEW)
        rig.wait_phases({node: "Draining"})
        assert rig.node(node)["spec"]["unschedulable"] is True
        # Now it can match the rig's nodes (though it matches none): the rig's GPUDriver,
        # the newer, yields.
        rig.kube.request(
            "PATCH",
            RIVAL_PATH,
            body={"spec": {"nodeSelector": {TEST_LABEL: rig.namespace, "gpuctl.test/pool": "x"}}},
            content_type=MERGE_PATCH,
        )
        conflict = f"no rollout: GPUDriver {RIVAL} already loads the driver on these nodes"
        wait_status(
            rig,
            f"is Paused for the conflict, finishing {node}",
            lambda s: (
                s.get("state") == "Paused"
                and str(s.get("message", "")).startswith(conflict)
                and f"finishing the step already begun on {node} (Draining)" in s["message"]
            ),
        )
        assert rig.phase(node) == "Draining"  # still waiting for the pod: the checks hold
        rig.kube.request(
            "DELETE",
            f"/api/v1/namespaces/{rig.namespace}/pods/{pod}",
            query={"gracePeriodSeconds": "0"},
        )
        rig.wait_phases({node: "Done"}, timeout=90)
        assert module_version(rig, node) == NEW
        assert not rig.node(node)["spec"].get("unschedulable")
        wait_status(
            rig,
            "is Paused for the conflict with nothing left to finish",
            lambda s: s.get("state") == "Paused" and s.get("message") == conflict,
        )
        assert rig.kernels.violations == []
        assert rig.kmm.unloads_while_busy() == []
    finally:
        remove_rival(rig)
