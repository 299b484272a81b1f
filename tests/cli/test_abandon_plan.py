"""`gpuctl driver abandon`'s node changes (gpuctl/cli/abandon_plan.py): only the abandoned
GPUDriver's marks go; another GPUDriver's labels and an admin's cordon stay."""

from __future__ import annotations

import datetime
from typing import Any

from gpuctl.cli.abandon_plan import RELEASED_ANNOTATIONS, live_holder, node_release, node_releases
from gpuctl.common import names

MINE, OTHER = "xe-driver", "xe-other"
MY_VERSION = names.kmm_version_label("gpuctl-system", f"{MINE}-gpu")
OTHER_VERSION = names.kmm_version_label("gpuctl-system", f"{OTHER}-gpu")
NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC)


def node(
    name: str,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
    *,
    cordoned: bool = False,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
        "spec": {"unschedulable": True} if cordoned else {},
    }


def done(driver: str, version_label: str) -> dict[str, str]:
    return {names.TARGET_LABEL: driver, version_label: "v1-abc", names.STATE_LABEL: "Done"}


def test_a_node_of_the_driver_loses_its_target_version_and_state_and_our_cordon() -> None:
    annotations = {
        names.GPUDRIVER: MINE,
        names.SINCE: "2026-12-01T00:00:00Z",
        names.CORDONED_BY_GPUCTL: "true",
        names.DRIVER_IMAGE: "registry.example/xe:1",
        "example.com/other": "kept",
    }
    release = node_release(
        MINE, [MY_VERSION], node("a", done(MINE, MY_VERSION), annotations, cordoned=True)
    )
    assert release is not None
    assert set(release.labels) == {names.TARGET_LABEL, MY_VERSION, names.STATE_LABEL}
    assert set(release.annotations) == {
        names.GPUDRIVER,
        names.SINCE,
        names.CORDONED_BY_GPUCTL,
        names.DRIVER_IMAGE,
    }
    assert release.uncordon
    assert release.unloads
    assert release.patch() == {
        "metadata": {
            "labels": dict.fromkeys(release.labels),
            "annotations": dict.fromkeys(release.annotations),
        },
        "spec": {"unschedulable": False},
    }


def test_another_drivers_node_is_untouched_even_cordoned_by_gpuctl() -> None:
    other = node(
        "b",
        done(OTHER, OTHER_VERSION),
        {names.GPUDRIVER: OTHER, names.CORDONED_BY_GPUCTL: "true"},
        cordoned=True,
    )
    assert node_release(MINE, [MY_VERSION], other) is None


def test_an_admins_cordon_stays() -> None:
    cordoned = node("c", done(MINE, MY_VERSION), {names.GPUDRIVER: MINE}, cordoned=True)
    release = node_release(MINE, [MY_VERSION], cordoned)
    assert release is not None
    assert not release.uncordon
    assert "spec" not in release.patch()


def test_a_node_of_both_keeps_the_other_drivers_state() -> None:
    # Moved from OTHER to MINE's selector mid-flight: our version label, their state.
    labels = {names.TARGET_LABEL: OTHER, OTHER_VERSION: "v2", MY_VERSION: "v1", "x": "y"}
    release = node_release(MINE, [MY_VERSION], node("d", labels, {names.GPUDRIVER: OTHER}))
    assert release is not None
    assert release.labels == (MY_VERSION,)
    assert release.annotations == ()


def test_state_without_an_owner_annotation_is_ours_only_where_we_are_the_target() -> None:
    ours = node_release(MINE, [], node("e", {names.TARGET_LABEL: MINE, names.STATE_LABEL: "Done"}))
    assert ours is not None
    assert names.STATE_LABEL in ours.labels
    theirs = node("f", {names.TARGET_LABEL: OTHER, names.STATE_LABEL: "Done"})
    assert node_release(MINE, [], theirs) is None


def test_prepare_changes_are_reported_for_the_admin() -> None:
    annotations = {names.GPUDRIVER: MINE, names.PREPARE_CHANGES: '{"vfs": 4}'}
    release = node_release(MINE, [MY_VERSION], node("g", done(MINE, MY_VERSION), annotations))
    assert release is not None
    assert release.prepare_changes == '{"vfs": 4}'
    assert names.PREPARE_CHANGES in release.annotations


def test_the_autoscalers_annotation_goes_where_gpuctl_set_it_and_an_admins_stays() -> None:
    ours = {
        names.GPUDRIVER: MINE,
        names.SCALE_DOWN_DISABLED: "true",
        names.SCALE_DOWN_DISABLED_BY_GPUCTL: "true",
    }
    release = node_release(MINE, [MY_VERSION], node("h", done(MINE, MY_VERSION), ours))
    assert release is not None
    assert {names.SCALE_DOWN_DISABLED, names.SCALE_DOWN_DISABLED_BY_GPUCTL} <= set(
        release.annotations
    )
    admins = {names.GPUDRIVER: MINE, names.SCALE_DOWN_DISABLED: "true"}
    kept = node_release(MINE, [MY_VERSION], node("i", done(MINE, MY_VERSION), admins))
    assert kept is not None
    assert names.SCALE_DOWN_DISABLED not in kept.annotations


def test_every_rollout_annotation_is_released() -> None:
    for key in (*names.STATE_ANNOTATIONS, names.DRIVER_IMAGE):
        assert key in RELEASED_ANNOTATIONS


def test_releases_are_by_node_name_and_skip_nodes_without_our_marks() -> None:
    nodes = [
        node("z", done(MINE, MY_VERSION)),
        node("m", {"kubernetes.io/os": "linux"}),
        node("a", done(MINE, MY_VERSION)),
    ]
    assert [r.node for r in node_releases(MINE, [MY_VERSION], nodes)] == ["a", "z"]


def lease(holder: str | None, renewed: str | None, seconds: int | None) -> dict[str, Any]:
    spec = {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": seconds}
    return {"metadata": {"name": "gpuctl-coordinator"}, "spec": spec}


def test_a_lease_is_live_only_when_held_and_renewed_within_its_duration() -> None:
    assert live_holder(lease("pod-1", "2026-12-02T11:59:50.000000Z", 15), NOW) == "pod-1"
    assert live_holder(lease("pod-1", "2026-12-02T11:59:00.000000Z", 15), NOW) is None
    assert live_holder(lease(None, "2026-12-02T11:59:50.000000Z", 15), NOW) is None
    assert live_holder(lease("pod-1", "garbage", 15), NOW) is None
    assert live_holder(lease("pod-1", None, 15), NOW) is None
