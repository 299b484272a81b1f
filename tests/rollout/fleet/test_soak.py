"""The soak (pure): a node verified at the target is watched for soakSeconds before the next
node starts; one that degrades fails; a clean report after the soak ends it."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode, RequestReport
from gpuctl.rollout.decide import decide
from gpuctl.rollout.fleet.soak import taint_words
from gpuctl.rollout.input.facts import INSPECT
from gpuctl.rollout.input.settings import RolloutSettings
from gpuctl.rollout.step.soak_baseline import baseline
from tests.support.rollout_samples import (
    PF,
    TARGET,
    answered,
    loaded_labels,
    new_report,
    node,
    rollout,
)

O_E = (1 << 12) | (1 << 13)
W = 1 << 9
SOAK = RolloutSettings(hold_after_first_node=False, soak_seconds=60)


def healthy(tainted: int | None = O_E, **overrides: Any) -> Any:
    values: dict[str, Any] = {"drivers": {PF: "xe"}}
    values.update(overrides)
    return dataclasses.replace(new_report(**values), kernel_tainted=tainted)


def soaking_node(since: float, report: Any = None, finished_ago: float = 0.5) -> Any:
    record = baseline("xe", healthy())
    done = node(
        "a",
        phase=Phase.DONE,
        since=since,
        labels=loaded_labels(TARGET),
        annotations={names.SOAK_BASELINE: record},
    )
    if report is None:
        return done
    return answered(done, INSPECT, report=report, finished_ago=finished_ago)


def waiting() -> Any:
    return node("b", phase=Phase.PENDING, version=TARGET)


def test_taint_words_name_the_kernels_flags() -> None:
    assert taint_words(W | O_E) == "W (bit 9), O (bit 12), E (bit 13)"


def test_while_a_node_soaks_no_other_starts_and_its_agent_is_asked() -> None:
    decision = decide(rollout([soaking_node(since=10), waiting()], settings=SOAK))
    assert not [a for a in decision.actions if isinstance(a, PatchNode)]
    assert [a.node for a in decision.actions if isinstance(a, RequestReport)] == ["a"]
    assert decision.status is not None
    assert decision.status["message"] == "soaking before the next node starts: a (50s left)"


def test_a_new_kernel_taint_flag_during_the_soak_fails_the_node() -> None:
    degraded = healthy(tainted=O_E | W)
    decision = decide(rollout([soaking_node(10, degraded), waiting()], settings=SOAK))
    [fail] = [a for a in decision.actions if isinstance(a, PatchNode)]
    assert (fail.node, fail.phase_to) == ("a", Phase.FAILED)
    assert fail.annotations[names.REASON] == "soak: new kernel taint flag(s): W (bit 9)"
    assert decision.status is not None
    assert decision.status["message"] == "soaking before the next node starts: a (failed it)"


def test_an_unbound_function_or_another_module_fails_the_node() -> None:
    unbound = healthy(drivers={PF: ""})
    decision = decide(rollout([soaking_node(10, unbound)], settings=SOAK))
    [fail] = [a for a in decision.actions if isinstance(a, PatchNode)]
    assert fail.annotations[names.REASON] == f"soak: {PF} not bound to xe (unbound)"
    gone = healthy(state="NOT_LOADED")
    decision = decide(rollout([soaking_node(10, gone)], settings=SOAK))
    [fail] = [a for a in decision.actions if isinstance(a, PatchNode)]
    assert str(fail.annotations[names.REASON]).startswith("soak: xe is NOT_LOADED, not live")


def test_a_clean_report_after_the_soak_ends_it_and_the_next_node_starts() -> None:
    decision = decide(
        rollout([soaking_node(70, healthy(), finished_ago=1), waiting()], settings=SOAK)
    )
    writes = {a.node: a for a in decision.actions if isinstance(a, PatchNode)}
    assert writes["a"].annotations == {names.SOAK_BASELINE: None}
    assert writes["b"].phase_to is Phase.CHECKING


def test_an_answer_from_before_the_soak_ended_or_without_a_taint_mask_does_not_end_it() -> None:
    old_answer = soaking_node(70, healthy(), finished_ago=20)
    decision = decide(rollout([old_answer, waiting()], settings=SOAK))
    assert not [a for a in decision.actions if isinstance(a, PatchNode)]
    unknown = healthy(tainted=None)
    decision = decide(rollout([soaking_node(70, unknown), waiting()], settings=SOAK))
    assert not [a for a in decision.actions if isinstance(a, PatchNode)]
    assert decision.status is not None
    assert "a (a last report)" in decision.status["message"]


def loaded_in_its_step(name: str) -> Any:
    """A node KMM loaded at the target in this step (its Checking recorded what ran before)."""
    before = {names.SRCVERSION_BEFORE: "OLDSRC"}
    verifying = node(name, phase=Phase.VERIFYING, labels=loaded_labels(TARGET), annotations=before)
    return answered(verifying, INSPECT, report=healthy())


def test_without_soak_each_batch_only_the_first_verified_node_keeps_a_baseline() -> None:
    verifying = loaded_in_its_step("b")
    first = node("a", phase=Phase.DONE, labels=loaded_labels(TARGET))
    decision = decide(rollout([first, verifying], settings=SOAK))
    [done] = [a for a in decision.actions if isinstance(a, PatchNode)]
    assert (done.node, done.phase_to) == ("b", Phase.DONE)
    assert done.annotations[names.SOAK_BASELINE] is None
    each = dataclasses.replace(SOAK, soak_each_batch=True)
    decision = decide(rollout([first, verifying], settings=each))
    [done] = [a for a in decision.actions if isinstance(a, PatchNode)]
    assert done.annotations[names.SOAK_BASELINE] == baseline("xe", healthy())
    alone = decide(rollout([verifying], settings=SOAK))
    [done] = [a for a in alone.actions if isinstance(a, PatchNode)]
    assert done.annotations[names.SOAK_BASELINE] == baseline("xe", healthy())


def test_a_node_verified_in_place_does_not_soak_nor_hold_the_next_node() -> None:
    """KMM had loaded the target before the rollout reached the node (as on an untouched node
    after a rollback): its verification loads nothing, so it records no baseline and nothing
    soaks to hold the next node (found by the soak's end-to-end test, whose rollback waited
    out a whole soakSeconds of the node it never touched)."""
    in_place = answered(
        node("b", phase=Phase.VERIFYING, labels=loaded_labels(TARGET)),
        INSPECT,
        report=healthy(),
    )
    decision = decide(rollout([in_place], settings=SOAK))
    [done] = [a for a in decision.actions if isinstance(a, PatchNode)]
    assert (done.node, done.phase_to) == ("b", Phase.DONE)
    assert done.annotations[names.SOAK_BASELINE] is None
    loaded = decide(rollout([loaded_in_its_step("b")], settings=SOAK))
    [done] = [a for a in loaded.actions if isinstance(a, PatchNode)]
    assert done.annotations[names.SOAK_BASELINE] == baseline("xe", healthy())


def test_a_baseline_goes_with_any_move_so_a_node_never_soaks_on_a_stale_one() -> None:
    # Verified at the target once, then the target moved on and back (a rollback): placed
    # again (Pending: verified in this boot when its turn comes), it must not soak on the old
    # baseline.
    stale = node(
        "b",
        phase=Phase.PENDING,
        version="v9-99999999",
        labels=loaded_labels(TARGET),
        annotations={names.SOAK_BASELINE: baseline("xe", healthy())},
    )
    decision = decide(rollout([stale], settings=SOAK))
    [placed] = [a for a in decision.actions if isinstance(a, PatchNode)]
    assert placed.phase_to in (Phase.PENDING, Phase.VERIFYING)
    assert placed.annotations[names.SOAK_BASELINE] is None


def test_a_gpu_entering_survivability_mode_during_the_soak_fails_the_node() -> None:
    sick = healthy()
    device = sick.report.devices.add(pci_address=PF, driver="xe")
    device.survivability.mode = pb.Survivability.RUNTIME
    decision = decide(rollout([soaking_node(10, sick)], settings=SOAK))
    [fail] = [a for a in decision.actions if isinstance(a, PatchNode)]
    assert str(fail.annotations[names.REASON]).startswith(
        f"soak: in survivability mode: {PF} (Runtime)"
    )
