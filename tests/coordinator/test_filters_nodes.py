"""Which Node events ask the rollout for a pass: a change of anything it reads (labels,
annotations, cordon, taints, Ready, the kernel), a Node coming or going; not a kubelet's
status heartbeat, which changes only what the watch does not keep and the resourceVersion.
A reboot is a change even into the same kernel: the rollout tells it by the boot ID."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from coordinator.filters import rollout_node_part
from gpuctl.common.names import REASON, STATE_LABEL
from tests.support import samples
from tests.support.counting_coordinator import counting_coordinator


def _kubelet_node() -> dict[str, Any]:
    """A Node as a kubelet keeps it: bookkeeping, capacity and images beside what is read."""
    node = samples.node("n1", {"kubernetes.io/arch": "amd64"}, kernel="6.8.0-45-generic")
    node["status"]["nodeInfo"]["bootID"] = "0f2c9d5e-1b7a-4c3e-9a51-6d2e8f4b7c10"
    node["metadata"]["resourceVersion"] = "7"
    node["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    node["metadata"]["annotations"] = {"node.alpha.kubernetes.io/ttl": "0"}
    node["spec"] = {"podCIDR": "10.0.0.0/24"}
    node["status"]["conditions"] = [
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": "2026-12-05T04:00:00Z",
        }
    ]
    node["status"]["capacity"] = {"cpu": "32"}
    node["status"]["images"] = [{"names": ["registry.example.com/app:1"], "sizeBytes": 1}]
    return node


def _heartbeat(node: dict[str, Any]) -> None:
    node["metadata"]["resourceVersion"] = "8"
    node["metadata"]["managedFields"] = [{"manager": "kubelet", "time": "2026-12-05T04:05:00Z"}]
    node["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-12-05T04:05:00Z"
    node["status"]["conditions"][0]["message"] = "kubelet is posting ready status."
    node["status"]["images"].append({"names": ["registry.example.com/app:2"], "sizeBytes": 2})


def _label(node: dict[str, Any]) -> None:
    node["metadata"]["labels"][STATE_LABEL] = "Checking"


def _annotation(node: dict[str, Any]) -> None:
    node["metadata"]["annotations"][REASON] = "asking the agent"


def _cordon(node: dict[str, Any]) -> None:
    node["spec"]["unschedulable"] = True


def _taint(node: dict[str, Any]) -> None:
    node["spec"]["taints"] = [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]


def _not_ready(node: dict[str, Any]) -> None:
    node["status"]["conditions"][0].update(status="Unknown", reason="NodeStatusUnknown")


def _rebooted_into_another_kernel(node: dict[str, Any]) -> None:
    node["status"]["nodeInfo"]["kernelVersion"] = "6.8.0-60-generic"


def _rebooted_into_the_same_kernel(node: dict[str, Any]) -> None:
    """A reboot is told by the boot ID alone (reboots.py): a Done node must be verified again."""
    node["status"]["nodeInfo"]["bootID"] = "5a8e0b3f-7c21-4d9e-b6f4-0e1d2c3b4a59"


def _deleting(node: dict[str, Any]) -> None:
    node["metadata"]["deletionTimestamp"] = "2026-12-05T04:06:00Z"


READ_BY_THE_ROLLOUT = [
    _label,
    _annotation,
    _cordon,
    _taint,
    _not_ready,
    _rebooted_into_another_kernel,
    _rebooted_into_the_same_kernel,
    _deleting,
]


def test_a_heartbeat_changes_nothing_the_rollout_reads() -> None:
    before = _kubelet_node()
    after = copy.deepcopy(before)
    _heartbeat(after)
    assert rollout_node_part(before) == rollout_node_part(after)


@pytest.mark.parametrize("change", READ_BY_THE_ROLLOUT, ids=lambda f: f.__name__.strip("_"))
def test_what_the_rollout_reads_is_a_change(change: Any) -> None:
    before = _kubelet_node()
    after = copy.deepcopy(before)
    change(after)
    _heartbeat(after)
    assert rollout_node_part(before) != rollout_node_part(after)


def test_the_node_handler_asks_a_pass_for_changes_and_none_for_heartbeats() -> None:
    coordinator = counting_coordinator()
    node = _kubelet_node()
    coordinator._on_node("ADDED", copy.deepcopy(node))
    assert coordinator.passes_asked == 1
    _heartbeat(node)
    coordinator._on_node("MODIFIED", copy.deepcopy(node))
    assert coordinator.passes_asked == 1
    _cordon(node)
    coordinator._on_node("MODIFIED", copy.deepcopy(node))
    assert coordinator.passes_asked == 2
    assert coordinator.reconciles_asked == 1  # the ADDED only: a cordon is not the reconciler's
    coordinator._on_node("MODIFIED", copy.deepcopy(node))  # a relist's copy, unchanged
    assert coordinator.passes_asked == 2
    coordinator._on_node("DELETED", copy.deepcopy(node))
    assert coordinator.passes_asked == 3
    # Back under the same name (a node re-registered): a change, though the same as before.
    coordinator._on_node("ADDED", copy.deepcopy(node))
    assert coordinator.passes_asked == 4


def test_a_modified_node_never_seen_asks_a_pass() -> None:
    """The first event of a node may be MODIFIED (a relist after a gap): nothing to compare
    it with, so it is a change."""
    coordinator = counting_coordinator()
    coordinator._on_node("MODIFIED", _kubelet_node())
    assert coordinator.passes_asked == 1
