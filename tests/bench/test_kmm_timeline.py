"""bench/kmm_timeline.py: the moments of a node's upgrade as the bench's watches show them
(first sight only; KMM's worker Pods by their action; a Pod being deleted is no moment; gpuctl's
states only about the version), the stretches between them over the nodes that had both, and
the fleet's start (KMM's image pull Pod, the first write, the first node ready)."""

from __future__ import annotations

from typing import Any

from bench.kmm_timeline import STRETCHES, Moments, fleet_start, side_by_side, stretches
from gpuctl.common import names
from gpuctl.rollout.input.build import kmm_labels

LABELS = kmm_labels("fleet", "gpu")
VERSION = "v7"


def node(name: str, labels: dict[str, str], about: str | None = None) -> dict[str, Any]:
    annotations = {names.STATE_VERSION: about} if about else {}
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations}}


def worker(node_name: str, action: str, phase: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": {"kmm.node.kubernetes.io/worker-action": action}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-04T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node_name}, "status": {"phase": phase}}


def one_upgrade(moments: Moments) -> None:
    """n1 through gpuctl's steps and KMM's two workers, at whole-second moments."""
    moments.node(node("n1", {names.STATE_LABEL: "Checking"}, about=VERSION), 1.0)
    moments.node(node("n1", {names.STATE_LABEL: "Checking"}, about=VERSION), 1.5)
    written = {names.STATE_LABEL: "Loading", LABELS.version: VERSION}
    moments.node(node("n1", written, about=VERSION), 4.0)
    moments.pod(worker("n1", "Unload", "Pending"), 5.0)
    moments.pod(worker("n1", "Unload", "Succeeded"), 11.0)
    moments.pod(worker("n1", "Unload", "Succeeded", deleting=True), 11.5)
    moments.pod(worker("n1", "Load", "Pending"), 12.0)
    moments.pod(worker("n1", "Load", "Running"), 17.0)
    moments.pod(worker("n1", "Load", "Succeeded"), 18.0)
    moments.node(node("n1", {**written, LABELS.version_ready: VERSION}, about=VERSION), 19.0)
    verifying = {**written, LABELS.version_ready: VERSION, names.STATE_LABEL: "Verifying"}
    moments.node(node("n1", verifying, about=VERSION), 20.0)
    moments.node(node("n1", {**verifying, names.STATE_LABEL: "Done"}, about=VERSION), 21.5)


def test_each_moment_is_its_first_sight() -> None:
    moments = Moments(LABELS, VERSION, VERSION)
    one_upgrade(moments)
    assert moments.seen() == {
        "n1": {
            "Checking": 1.0,
            "Loading": 4.0,
            "written": 4.0,
            "unloader created": 5.0,
            "unloader succeeded": 11.0,
            "loader created": 12.0,
            "loader succeeded": 18.0,
            "ready": 19.0,
            "Verifying": 20.0,
            "Done": 21.5,
        }
    }


def test_stretches_of_one_upgrade() -> None:
    moments = Moments(LABELS, VERSION, VERSION)
    one_upgrade(moments)
    figures = {f.stretch.label: f.timings for f in stretches(moments.seen())}
    medians = {label: t.median if t else None for label, t in figures.items()}
    assert list(medians) == [s.label for s in STRETCHES]
    assert list(medians.values()) == [3.0, 1.0, 6.0, 1.0, 6.0, 1.0, 1.0, 1.5, 15.0]


def test_other_versions_other_labels_and_no_gpuctl_are_no_moments() -> None:
    floor = Moments(LABELS, VERSION, None)  # the floor: no gpuctl states are moments
    floor.node(node("n1", {names.STATE_LABEL: "Checking"}, about=VERSION), 1.0)
    floor.node(node("n2", {LABELS.version: "v6", LABELS.version_ready: "v6"}), 2.0)
    floor.pod(worker("n3", "Build", "Succeeded"), 3.0)
    floor.pod({"metadata": {"labels": {}}, "spec": {}, "status": {}}, 4.0)
    floor.pod(worker("", "Load", "Pending"), 5.0)
    floor.pod(worker("n4", "Load", "Pending", deleting=True), 6.0)
    assert floor.seen() == {}
    gpuctl = Moments(LABELS, VERSION, VERSION)
    gpuctl.node(node("n1", {names.STATE_LABEL: "Checking"}, about="v6"), 1.0)
    gpuctl.node(node("n1", {names.STATE_LABEL: "Pending"}, about=VERSION), 2.0)
    assert gpuctl.seen() == {}


def test_a_stretch_without_both_moments_on_any_node_has_no_figures() -> None:
    seen = {"n1": {"written": 1.0, "ready": 5.0}, "n2": {"written": 2.0, "ready": 4.0}}
    figures = {f.stretch.label: f.timings for f in stretches(seen)}
    whole = figures["KMM write -> ready label, in all"]
    assert whole is not None
    assert sorted(whole.seconds) == [2.0, 4.0]
    assert figures["KMM write -> unloader Pod created"] is None


def test_side_by_side_prints_each_run_in_order_and_a_dash_for_none() -> None:
    gpuctl = stretches({"n1": {"written": 1.0, "ready": 5.0, "Verifying": 5.5}})
    floor = stretches({"n1": {"written": 1.0, "ready": 4.0}})
    lines = side_by_side({"gpuctl": gpuctl, "floor": floor})
    assert len(lines) == len(STRETCHES) + 1
    assert lines[0].split()[-3:] == ["gpuctl", "floor", "whose"]
    (verifying,) = [line for line in lines if "ready label -> Verifying" in line]
    assert "0.50 (0.50)" in verifying
    assert verifying.split("0.50 (0.50)")[1].split()[0] == "-"
    (whole,) = [line for line in lines if "in all" in line]
    assert whole.index("4.00 (4.00)") < whole.index("3.00 (3.00)")


def pull(phase: str) -> dict[str, Any]:
    labels = {"kmm.node.kubernetes.io/pull-pod-type": "pull"}
    return {"metadata": {"labels": labels}, "spec": {}, "status": {"phase": phase}}


def test_the_fleet_start_the_image_pull_then_the_first_write_and_ready() -> None:
    moments = Moments(LABELS, VERSION, VERSION)
    moments.pod(pull("Pending"), 100.5)
    moments.pod(pull("Succeeded"), 102.0)
    moments.pod(pull("Succeeded"), 103.0)
    moments.node(node("n2", {LABELS.version: VERSION}), 104.0)
    moments.node(node("n1", {LABELS.version: VERSION}), 103.5)
    moments.node(node("n1", {LABELS.version: VERSION, LABELS.version_ready: VERSION}), 110.0)
    assert moments.fleet() == {"pull created": 100.5, "pull succeeded": 102.0}
    assert "n1" in moments.seen()
    assert fleet_start(moments.seen(), moments.fleet(), 100.0) == (
        "KMM's image pull Pod created 0.50 s, pull Pod Succeeded 2.00 s, "
        "the first KMM write 3.50 s, the first node ready 10.00 s"
    )


def test_the_fleet_start_says_what_was_not_seen() -> None:
    words = fleet_start({"n1": {"written": 5.0}}, {}, 1.0)
    assert words == (
        "KMM's image pull Pod created: not seen, pull Pod Succeeded: not seen, "
        "the first KMM write 4.00 s, the first node ready: not seen"
    )
