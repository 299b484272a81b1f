"""KMM's worker hold list made of the Nodes, one write a pass (coordinator/rollout/
worker_holds.py, gpuctl/rollout/step/worker_hold.py held_nodes), and what is said when it cannot
be written (status, condition, the Loading timeout)."""

from __future__ import annotations

import dataclasses
from typing import Any

from coordinator.kube.client import KubeError, path
from coordinator.rollout.worker_holds import RETRY_SECONDS, WorkerHolds
from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.gpudriver.kstatus import WORKER_HOLDS_WRITTEN, rollout_conditions
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.decide import decide
from gpuctl.rollout.input.settings import RolloutSettings, Timeouts
from gpuctl.rollout.step.loading import step_loading
from gpuctl.rollout.step.worker_hold import held_nodes
from tests.support.memory_api import MemoryApi
from tests.support.rollout_samples import TARGET, node, rollout, targeted

NAMESPACE = "gpuctl-system"
NAMESPACE_PATH = path("", "v1", "namespaces", name=NAMESPACE)


def a_node(name: str, *, held: bool) -> dict[str, Any]:
    annotations = {names.KMM_WORKER_HELD: TARGET} if held else {}
    return {"metadata": {"name": name, "annotations": annotations}}


def listed(api: MemoryApi) -> str | None:
    annotations = api.objects[NAMESPACE_PATH]["metadata"].get("annotations") or {}
    return annotations.get(names.KMM_WORKER_HOLDS)


def world(holds: str | None = None) -> tuple[MemoryApi, WorkerHolds]:
    api = MemoryApi()
    meta: dict[str, Any] = {"name": NAMESPACE, "resourceVersion": "1"}
    if holds is not None:
        meta["annotations"] = {names.KMM_WORKER_HOLDS: holds}
    api.objects[NAMESPACE_PATH] = {"metadata": meta}
    return api, WorkerHolds(api, NAMESPACE, enabled=True)


def test_the_held_nodes_are_those_whose_node_carries_the_hold() -> None:
    nodes = [a_node("a", held=True), a_node("b", held=False), a_node("c", held=True)]
    assert held_nodes(nodes) == {"a", "c"}


def test_the_list_is_written_once_for_a_pass_and_not_again_while_it_is_the_same() -> None:
    api, holds = world()
    assert holds.sync([a_node("a", held=True), a_node("b", held=True)]) is None
    assert listed(api) == "a b"
    patches = [w for w in api.writes if w[0] == "PATCH"]
    assert len(patches) == 1  # both holds of the pass, one write
    before = len(api.requests)
    assert holds.sync([a_node("a", held=True), a_node("b", held=True)]) is None
    assert len(api.requests) == before  # known: not even read again


def test_a_node_deleted_or_re_registered_leaves_the_list() -> None:
    """An IP-named cloud node deleted and registered again under its name comes back without
    gpuctl's annotations: its hold goes with the old object. A hold left by an older build
    (or a failed node write) that no Node carries goes too."""
    api, holds = world("a b stale")
    holds.sync([a_node("a", held=True), a_node("b", held=False)])
    assert listed(api) == "a"
    holds.sync([])
    assert listed(api) is None


def test_a_list_that_cannot_be_written_is_said_and_tried_again() -> None:
    api, holds = world()
    api.fail[("PATCH", NAMESPACE_PATH)] = KubeError(403, "Forbidden")
    assert holds.sync([a_node("a", held=True)]) == RETRY_SECONDS
    assert "could not be written: 403 Forbidden" in holds.trouble
    assert listed(api) is None
    assert holds.sync([a_node("a", held=True)]) is None
    assert holds.trouble == ""
    assert listed(api) == "a"


def test_a_raced_write_is_tried_again_without_trouble() -> None:
    api, holds = world()
    api.fail[("PATCH", NAMESPACE_PATH)] = KubeError(409, "Conflict")
    assert holds.sync([a_node("a", held=True)]) == RETRY_SECONDS
    assert holds.trouble == ""


def test_the_trouble_is_in_the_status_and_the_condition() -> None:
    facts = node(phase=Phase.DONE, labels=targeted())
    trouble = "the worker holds on namespace gpuctl-system could not be written: 403 Forbidden"
    inp = dataclasses.replace(rollout([facts]), worker_holds_trouble=trouble)
    status = decide(inp).status
    assert status is not None
    assert status["workerHoldsTrouble"] == trouble
    assert status["message"].endswith(f"; {trouble}")
    conditions = {c["type"]: c for c in rollout_conditions(status, 3)}
    assert conditions[WORKER_HOLDS_WRITTEN]["status"] == "False"
    assert conditions[WORKER_HOLDS_WRITTEN]["message"] == trouble
    clean = decide(rollout([facts])).status
    assert clean is not None
    written = {c["type"]: c for c in rollout_conditions(clean, 3)}[WORKER_HOLDS_WRITTEN]
    assert written["status"] == "True"


def test_the_loading_timeout_names_a_hold_the_list_still_has() -> None:
    settings = RolloutSettings(hold_after_first_node=False, timeouts=Timeouts(load=60))
    loading = node(phase=Phase.LOADING, since=120, labels=targeted())
    inp = dataclasses.replace(
        rollout([loading], settings=settings), worker_holds=frozenset({loading.name})
    )
    [failed] = [a for a in step_loading(inp, loading).actions if isinstance(a, PatchNode)]
    reason = str(failed.annotations[names.REASON])
    assert f"the namespace's {names.KMM_WORKER_HOLDS} still lists it" in reason
