"""Revisions, rollback and undo end to end: `gpuctl-coordinator` (a real process), real agents
over gRPC and TLS on fake host roots, the real API server and real KMM, and the real
`gpuctl` command. Every test ends asserting that KMM never unloaded a busy node
(RolloutRig.close).
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest

from coordinator.kube.client import path
from gpuctl.common import names
from testbed.cluster_api import Api
from testbed.harness.waiting import wait_until
from testbed.rollout_live.images import NEW, OLD, image_of, kernel_mappings
from testbed.rollout_live.rig import BIN, DRIVER, RolloutRig
from testbed.rollout_live.scenario import (
    FAST,
    TIMEOUTS,
    module_version,
    start,
    wait_status,
)
from tests.support.argocd_health import argocd_health

pytestmark = pytest.mark.integration


def gpuctl(rig: RolloutRig, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "gpuctl"), *args, "--kubeconfig", str(rig.cluster.kubeconfig)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def revisions(rig: RolloutRig) -> list[tuple[int, str]]:
    entries = (rig.driver().get("status") or {}).get("revisions") or []
    return [(int(e["revision"]), str(e["version"])) for e in entries]


def wait_revisions(rig: RolloutRig, wanted: list[tuple[int, str]]) -> None:
    wait_until(f"status.revisions {wanted}", lambda: revisions(rig) == wanted or None)


def event_reasons(rig: RolloutRig) -> set[str]:
    return Api(rig.cluster).event_reasons(rig.driver()["metadata"]["uid"])


def test_a_node_failing_verification_is_rolled_back_verified_uncordoned_and_the_rollout_paused(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    rollout: dict[str, Any] = {
        **FAST,
        "onNodeFailure": "Rollback",
        "timeouts": {**TIMEOUTS, "verify": "4s"},
    }
    broken, other = start(rig, ["a", "b"], rollout)
    old, new = rig.kmm_version_at(OLD), rig.kmm_version_at(NEW)
    wait_revisions(rig, [(1, old)])
    rig.kernels.fail_probe(broken, NEW)  # NEW loads there, but its GPU does not probe
    loads_before = len(rig.kernels.loads)
    rig.set_version(NEW)
    status = wait_status(
        rig,
        f"paused at {old} after the rollback",
        lambda s: s.get("targetVersion") == old and s.get("state") == "Paused",
        timeout=180,  # the node's failed pass and its whole pass back, on a loaded machine
    )
    # The spec is the recorded revision's again, and the failed node went back through the
    # steps: OLD loaded, verified, uncordoned; the other node was never touched.
    assert rig.driver()["spec"]["kernelModule"] == {
        "moduleName": "xe",
        "version": OLD,
        "kernelMappings": kernel_mappings(OLD),
    }
    rig.wait_phases({broken: "Done", other: "Done"}, version=old)
    assert module_version(rig, broken) == OLD
    assert not rig.node(broken)["spec"].get("unschedulable")
    assert names.CORDONED_BY_GPUCTL not in rig.node(broken)["metadata"]["annotations"]
    loads = rig.kernels.loads[loads_before:]
    assert loads == [(broken, new), (broken, old)]  # the other node was never touched
    message = status["message"]
    assert message.startswith(f"paused: rolled back from {new} to revision 1 ({old})")
    assert f"{broken}: " in message
    assert "0000:03:00.0 not bound to xe (unbound)" in message
    # Argo CD's health check reads the GPUDriver as the coordinator wrote it: Degraded, why.
    # (Its conditions follow status.rollout a moment later: Degraded for the failure first.)
    rolled_back = f"paused: rolled back from {new} to revision 1 ({old})"
    wait_until(
        "Argo CD's health check to say Degraded: rolled back",
        lambda: (
            h
            if (h := argocd_health(rig.driver())).status == "Degraded"
            and h.message.startswith(rolled_back)
            else None
        ),
        timeout_seconds=30,
    )
    assert {"RollingBack", "RolloutPaused"} <= event_reasons(rig)
    wait_revisions(rig, [(2, new), (3, old)])
    # It stays paused (the failure in status) until `gpuctl rollout resume`.
    time.sleep(1)
    assert rig.rollout_status()["state"] == "Paused"
    resumed = gpuctl(rig, "rollout", "resume")
    assert resumed.returncode == 0, resumed.stderr
    wait_status(rig, "Complete", lambda s: s.get("state") == "Complete")
    assert rig.kernels.violations == []


def test_undo_of_a_finished_rollout_takes_the_fleet_back_node_by_node(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    nodes = start(rig, ["a", "b", "c"], FAST)
    old, new = rig.kmm_version_at(OLD), rig.kmm_version_at(NEW)
    rig.set_version(NEW)
    rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=120, version=new)
    wait_status(
        rig,
        f"Complete at {new}",
        lambda s: s.get("targetVersion") == new and s.get("state") == "Complete",
    )
    wait_revisions(rig, [(1, old), (2, new)])
    history = gpuctl(rig, "rollout", "history")
    assert history.returncode == 0, history.stderr
    lines = history.stdout.splitlines()
    assert lines[2].split()[:4] == ["1", old, image_of(OLD), "3"]
    assert lines[3].split()[:3] == ["2", "(current)", new]
    loads_before = len(rig.kernels.loads)
    undo = gpuctl(rig, "rollout", "undo")
    assert undo.returncode == 0, undo.stderr
    assert undo.stdout.startswith(f"gpudriver/gpu rolled back to revision 1 ({old})")
    assert rig.driver()["spec"]["kernelModule"]["version"] == OLD
    rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=120, version=old)
    wait_status(
        rig,
        f"Complete at {old}",
        lambda s: s.get("targetVersion") == old and s.get("state") == "Complete",
    )
    for node in nodes:
        assert module_version(rig, node) == OLD
        assert not rig.node(node)["spec"].get("unschedulable")
    # One load per node, in name order (one node at a time, through the same steps).
    assert rig.kernels.loads[loads_before:] == [(n, old) for n in sorted(nodes)]
    wait_revisions(rig, [(2, new), (3, old)])
    again = gpuctl(rig, "rollout", "undo", "--to-revision", "3")
    assert again.returncode != 0
    assert "revision 3 is the current one" in again.stderr
    assert rig.kernels.violations == []


def git_sync(rig: RolloutRig, version: str) -> None:
    """What Argo CD does once Git says `version`: a server-side apply of spec.kernelModule
    under its field manager (which then owns those fields)."""
    body = {
        "apiVersion": f"{names.GROUP}/{names.VERSION}",
        "kind": "GPUDriver",
        "metadata": {"name": DRIVER},
        "spec": {
            "kernelModule": {
                "moduleName": "xe",
                "version": version,
                "kernelMappings": kernel_mappings(version),
            }
        },
    }
    rig.kube.request(
        "PATCH",
        path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL, name=DRIVER),
        body=body,
        content_type="application/apply-patch+yaml",
        query={"fieldManager": "argocd-controller", "force": "true"},
    )


def test_a_rollback_where_argo_cd_applies_the_spec_is_left_to_git_then_made_from_it(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    rollout: dict[str, Any] = {
        **FAST,
        "onNodeFailure": "Rollback",
        "timeouts": {**TIMEOUTS, "verify": "4s"},
    }
    broken, other = start(rig, ["a", "b"], rollout)
    git_sync(rig, OLD)  # Argo CD adopts the GPUDriver: same spec, its field manager now
    old, new = rig.kmm_version_at(OLD), rig.kmm_version_at(NEW)
    wait_revisions(rig, [(1, old)])
    rig.kernels.fail_probe(broken, NEW)
    loads_before = len(rig.kernels.loads)
    git_sync(rig, NEW)
    status = wait_status(
        rig,
        f"paused at {new}, the rollback left to Git",
        lambda s: s.get("targetVersion") == new and s.get("holdKind") == "RollbackInGit",
        timeout=180,
    )
    # The coordinator wrote no spec (Argo CD's next sync would undo it) and said what to do.
    assert rig.driver()["spec"]["kernelModule"]["version"] == NEW
    assert status["state"] == "Paused"
    message = status["message"]
    assert message.startswith(f"paused: {new} failed on {broken} (")
    assert "applied by Argo CD (field manager argocd-controller)" in message
    assert f"put revision 1 ({old}) back in Git" in message
    assert "RollbackInGit" in event_reasons(rig)
    # Argo CD's health check follows a moment later (Degraded for the failure first).
    back_in_git = f"put revision 1 ({old}) back in Git"
    wait_until(
        "Argo CD's health check to say Degraded: put the revision back in Git",
        lambda: (
            h
            if (h := argocd_health(rig.driver())).status == "Degraded" and back_in_git in h.message
            else None
        ),
        timeout_seconds=30,
    )
    undo = gpuctl(rig, "rollout", "undo")
    assert undo.returncode != 0
    assert "applied by Argo CD (field manager argocd-controller)" in undo.stderr
    assert f"Put revision 1 ({old}) back in Git" in undo.stderr
    assert rig.driver()["spec"]["kernelModule"]["version"] == NEW
    # Git puts revision 1 back: the rollback goes on from there, the failed node alone.
    git_sync(rig, OLD)
    status = wait_status(
        rig,
        f"paused at {old} after the rollback",
        lambda s: s.get("targetVersion") == old and s.get("holdKind") == "RolledBack",
        timeout=180,
    )
    rig.wait_phases({broken: "Done", other: "Done"}, version=old)
    assert module_version(rig, broken) == OLD
    assert rig.kernels.loads[loads_before:] == [(broken, new), (broken, old)]
