"""The rollout's per-GPUDriver and per-node series: set from a pass, replaced when the
phase, version or target changes, removed when the GPUDriver is gone."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from coordinator.rollout.metrics import RolloutMetrics
from gpuctl.common.names import Phase


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def series(registry: CollectorRegistry, name: str) -> list[dict[str, str]]:
    return [
        dict(s.labels) for family in registry.collect() for s in family.samples if s.name == name
    ]


def test_state_hold_and_target_are_one_for_what_the_status_says() -> None:
    registry = CollectorRegistry()
    metrics = RolloutMetrics(registry)
    status = {"state": "Paused", "holdKind": "RolledBack", "targetVersion": "v1", "counts": {}}
    metrics.record("gpu", status, {}, {}, [])
    assert sample(registry, "gpuctl_rollout_state", gpudriver="gpu", state="Paused") == 1
    assert sample(registry, "gpuctl_rollout_state", gpudriver="gpu", state="Complete") == 0
    assert sample(registry, "gpuctl_rollout_hold", gpudriver="gpu", kind="RolledBack") == 1
    assert sample(registry, "gpuctl_rollout_hold", gpudriver="gpu", kind="Paused") == 0
    assert series(registry, "gpuctl_rollout_target_info") == [{"gpudriver": "gpu", "version": "v1"}]
    metrics.record("gpu", {"state": "Progressing", "targetVersion": "v2", "counts": {}}, {}, {}, [])
    assert sample(registry, "gpuctl_rollout_state", gpudriver="gpu", state="Paused") == 0
    assert sample(registry, "gpuctl_rollout_hold", gpudriver="gpu", kind="RolledBack") == 0
    assert series(registry, "gpuctl_rollout_target_info") == [{"gpudriver": "gpu", "version": "v2"}]


def test_a_node_has_one_phase_series_and_one_version_series() -> None:
    registry = CollectorRegistry()
    metrics = RolloutMetrics(registry)
    metrics.record("gpu", None, {"a": Phase.BLOCKED, "b": Phase.DONE}, {"a": "v1", "b": "v2"}, [])
    assert sorted(
        s["node"] + "/" + s["phase"] for s in series(registry, "gpuctl_node_rollout_phase")
    ) == [
        "a/Blocked",
        "b/Done",
    ]
    metrics.record("gpu", None, {"a": Phase.DRAINING}, {"a": "v2"}, [])
    assert series(registry, "gpuctl_node_rollout_phase") == [
        {"gpudriver": "gpu", "node": "a", "phase": "Draining"}
    ]
    assert series(registry, "gpuctl_node_driver_version_info") == [
        {"gpudriver": "gpu", "node": "a", "version": "v2"}
    ]


def test_a_deleted_gpudriver_leaves_no_series_behind() -> None:
    registry = CollectorRegistry()
    metrics = RolloutMetrics(registry)
    status = {"state": "Failed", "targetVersion": "v1", "counts": {"Failed": 1}}
    metrics.record("gone", status, {"a": Phase.FAILED}, {"a": "v1"}, [])
    metrics.record("kept", {"state": "Complete", "counts": {}}, {}, {}, [])
    metrics.forget("gone")
    metrics.forget("never-seen")  # nothing written for it: nothing to remove
    labelled = {
        s.labels.get("gpudriver")
        for family in registry.collect()
        for s in family.samples
        if "gpudriver" in s.labels
    }
    assert labelled == {"kept"}


def test_a_pass_writes_only_what_moved_and_every_series_still_reads_one() -> None:
    registry = CollectorRegistry()
    metrics = RolloutMetrics(registry)
    phases = {"a": Phase.DONE, "b": Phase.PENDING}
    versions = {"a": "v2", "b": "v1"}
    metrics.record("gpu", None, phases, versions, [])
    metrics.record("gpu", None, phases, versions, [])  # nothing moved
    metrics.record("gpu", None, {**phases, "b": Phase.CHECKING}, versions, [])  # b's phase only
    assert sorted(
        (s["node"], s["phase"]) for s in series(registry, "gpuctl_node_rollout_phase")
    ) == [("a", "Done"), ("b", "Checking")]
    for node, phase in (("a", "Done"), ("b", "Checking")):
        labels = {"gpudriver": "gpu", "node": node}
        assert sample(registry, "gpuctl_node_rollout_phase", **labels, phase=phase) == 1
        assert (
            sample(registry, "gpuctl_node_driver_version_info", **labels, version=versions[node])
            == 1
        )
    metrics.forget("gpu")
    metrics.record("gpu", None, phases, versions, [])  # after a forget: written afresh
    assert (
        sample(registry, "gpuctl_node_rollout_phase", gpudriver="gpu", node="b", phase="Pending")
        == 1
    )
