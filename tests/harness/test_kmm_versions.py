"""KMM's ordered-upgrade label table (V1) and its guards (V2)."""

from __future__ import annotations

import pytest

from tests.harness import kmm_versions as versions
from tests.harness.kmm_model import ready_label, version_module_label
from tests.harness.kmm_scheduling import worker_version_label

MODULE = version_module_label("ns", "xe")
WORKER = worker_version_label("ns", "xe")
SCHEDULE = versions.schedule_version_label("ns", "xe")
READY = ready_label("ns", "xe")


def test_label_names_are_kmm_v2_6_0s() -> None:
    assert WORKER == "beta.kmm.node.kubernetes.io/version-worker-pod.ns.xe"
    assert SCHEDULE == "beta.kmm.node.kubernetes.io/version-device-plugin.ns.xe"


@pytest.mark.parametrize(
    ("module", "worker", "schedule", "expected"),
    [
        ("", "", "", {}),
        ("", "1", "1", {SCHEDULE: None}),
        ("", "1", "", {WORKER: None}),
        ("2", "", "", {WORKER: "2"}),
        ("2", "2", "", {SCHEDULE: "2"}),
        ("2", "2", "2", {}),
        ("2", "1", "1", {SCHEDULE: None}),
        ("2", "1", "", {WORKER: None}),
        # Not in the table: nothing.
        ("2", "", "1", {}),
        ("2", "2", "1", {}),
        ("2", "1", "2", {}),
        ("", "", "1", {}),
    ],
)
def test_action_table(module: str, worker: str, schedule: str, expected: dict[str, str]) -> None:
    labels = {k: v for k, v in ((MODULE, module), (WORKER, worker), (SCHEDULE, schedule)) if v}
    assert versions.label_change(labels, "ns", "xe") == expected


def test_states_are_relative_to_the_module_label() -> None:
    p, m, d = versions.State.PRESENT, versions.State.MISSING, versions.State.DIFFERENT
    assert versions.label_states("2", "1", "2") == (p, d, p)
    assert versions.label_states("", "1", "2") == (m, p, p)  # no "different" without module
    assert versions.label_states("2", "", "") == (p, m, m)


def test_worker_label_waits_for_the_ready_label_to_go_before_it_is_added() -> None:
    labels = {MODULE: "2", READY: ""}
    assert versions.label_change(labels, "ns", "xe") == {}
    assert versions.label_change({MODULE: "2"}, "ns", "xe") == {WORKER: "2"}


def test_worker_label_stays_while_a_device_plugin_pod_runs() -> None:
    labels = {MODULE: "2", WORKER: "1"}
    assert versions.label_change(labels, "ns", "xe", schedule_pods_on_node=True) == {}
    assert versions.label_change(labels, "ns", "xe") == {WORKER: None}


def test_every_module_of_the_namespace_takes_one_step() -> None:
    labels = {
        MODULE: "2",
        version_module_label("ns", "other"): "1",
        worker_version_label("ns", "other"): "1",
        version_module_label("elsewhere", "xe"): "9",
        "unrelated": "x",
    }
    assert versions.modules_with_version_labels(labels, "ns") == {"xe", "other"}
    assert versions.label_changes(labels, "ns") == {
        WORKER: "2",
        versions.schedule_version_label("ns", "other"): "1",
    }
