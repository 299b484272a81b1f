"""The rollout I/O layer's helpers with plain data and real Futures: GPU pods, claims per
node, the Eviction body, the node overlay, the agent call table, metrics' blocked kinds."""

from __future__ import annotations

import concurrent.futures
from typing import Any

from prometheus_client import CollectorRegistry

from coordinator.rollout.agent_calls import CallTable
from coordinator.rollout.metrics import RolloutMetrics
from coordinator.rollout.overlay import NodeOverlay
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.input.facts import INSPECT, GpuPod
from gpuctl.rollout.input.gpu_pod_watch import eviction, gpu_pods
from gpuctl.rollout.reasons import BlockKind
from tests.support.rollout_samples import NOW, ago


def pod(
    name: str, resources: dict[str, Any], phase: str = "Running", init: bool = False
) -> dict[str, Any]:
    containers = [{"name": "c", "resources": resources}]
    spec = {"initContainers": containers} if init else {"containers": containers}
    return {"metadata": {"namespace": "ml", "name": name}, "spec": spec, "status": {"phase": phase}}


def test_gpu_pods_are_those_using_gpu_resources_and_not_finished() -> None:
    pods = [
        pod("train", {"limits": {"gpu.intel.com/xe": "1"}}),
        pod("init", {"requests": {"gpu.intel.com/i915": "1"}}, init=True),
        pod("done", {"limits": {"gpu.intel.com/xe": "1"}}, phase="Succeeded"),
        pod("cpu", {"limits": {"cpu": "1"}}),
        pod("nvidia", {"limits": {"nvidia.com/gpu": "1"}}),
    ]
    assert gpu_pods(pods) == (GpuPod("ml", "init"), GpuPod("ml", "train"))


def test_eviction_uses_the_policy_v1_api() -> None:
    assert eviction(GpuPod("ml", "train")) == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "train", "namespace": "ml"},
    }


def node_obj(name: str, version: str, state: str = "Pending") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": version, "labels": {"s": state}}}


def test_overlay_serves_our_write_until_the_cache_catches_up() -> None:
    overlay = NodeOverlay()
    overlay.remember(node_obj("a", "12", "Checking"))
    assert overlay.apply([node_obj("a", "10")])[0]["metadata"]["labels"]["s"] == "Checking"
    assert (
        overlay.apply([node_obj("a", "12", "Checking")])[0]["metadata"]["resourceVersion"] == "12"
    )
    # Once the cache is as new, the cache wins (and the overlay forgets).
    assert overlay.apply([node_obj("a", "10")])[0]["metadata"]["resourceVersion"] == "10"


def test_call_table_records_answers_errors_and_ignores_stale_attempts() -> None:
    answered: list[str] = []
    table = CallTable(NOW.timestamp, answered.append)
    future: concurrent.futures.Future[report_pb.NodeReport] = concurrent.futures.Future()
    assert table.start("a", INSPECT, "Checking@1", lambda: future)
    assert not table.start("a", INSPECT, "Checking@1", lambda: future)  # in flight
    assert table.for_nodes(["a"])["a"][INSPECT].in_flight
    future.set_result(report_pb.NodeReport(module=report_pb.Module(state=report_pb.Module.LIVE)))
    state = table.for_nodes(["a"])["a"][INSPECT]
    assert state.answered
    assert state.report is not None
    assert state.report.module_state == "LIVE"
    assert answered == ["a"]
    failing: concurrent.futures.Future[report_pb.NodeReport] = concurrent.futures.Future()
    table.start("a", INSPECT, "Draining@2", lambda: failing)
    old: concurrent.futures.Future[report_pb.NodeReport] = concurrent.futures.Future()
    failing.set_exception(TimeoutError())
    assert table.for_nodes(["a"])["a"][INSPECT].error == "the agent did not answer in time"
    old.set_result(report_pb.NodeReport())  # never started: nothing recorded

    def refuse() -> concurrent.futures.Future[report_pb.NodeReport]:
        raise RuntimeError("the coordinator serves no agents")

    table.start("b", INSPECT, "Checking@3", refuse)
    assert table.for_nodes(["b"])["b"][INSPECT].error == "the coordinator serves no agents"
    # A pass reads every node's calls at once; nodes nobody called are left out.
    both = table.for_nodes(["a", "b", "c"])
    assert set(both) == {"a", "b"}
    assert both["b"][INSPECT].error == "the coordinator serves no agents"


def test_metrics_count_phases_steps_and_blocked_kinds() -> None:
    registry = CollectorRegistry()
    metrics = RolloutMetrics(registry)
    metrics.record("gpu", {"counts": {"Done": 3, "Blocked": 1}}, {}, {}, [BlockKind.OPEN_CLIENTS])
    assert (
        registry.get_sample_value("gpuctl_rollout_nodes", {"gpudriver": "gpu", "phase": "Done"})
        == 3
    )
    assert (
        registry.get_sample_value("gpuctl_rollout_nodes", {"gpudriver": "gpu", "phase": "Failed"})
        == 0
    )
    labels = {"gpudriver": "gpu", "reason": "open-clients"}
    assert registry.get_sample_value("gpuctl_rollout_blocked_nodes", labels) == 1
    metrics.record("gpu", {"counts": {"Done": 4}}, {}, {}, [])
    assert registry.get_sample_value("gpuctl_rollout_blocked_nodes", labels) == 0
    patch = PatchNode("a", "1", phase_from=Phase.LOADING, phase_to=Phase.VERIFYING)
    metrics.transition(patch, ago(42), NOW)
    assert registry.get_sample_value("gpuctl_rollout_step_seconds_sum", {"phase": "Loading"}) == 42
