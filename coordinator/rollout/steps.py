"""One node's step of the rollout: from its phase and facts to the next action (pure).

Each in-progress phase has a function here. Every transition is one PatchNode that writes
the new phase with everything the next step relies on (cordon, the records of what the node
looked like, the KMM version label), so a restart finds either the old step (and repeats
its read-only or idempotent part) or the new one, never half of one. Agent answers belong to
the step's attempt (phase, since, version): after a restart the step simply asks again.

Blocked (uncordoned unless the node was already labelled, auto-retried when its blocker goes
away) means "something outside gpuctl holds the node"; Failed (kept cordoned, counted against
the failure budget, retried by `gpuctl rollout retry`) means a step went wrong or timed out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from coordinator.event_notes import NORMAL, WARNING, EventNote, EventType
from coordinator.rollout.actions import (
    Action,
    EvictPods,
    PatchNode,
    RequestReport,
    SendPrepare,
    SendRestore,
)
from coordinator.rollout.facts import (
    INSPECT,
    PREPARE,
    RESTORE,
    CallState,
    NodeFacts,
    PrepareFacts,
    ReportFacts,
    RolloutInput,
)
from coordinator.rollout.records import (
    RecordError,
    decode_bound,
    decode_changes,
    decode_vfs,
    encode_bound,
    encode_changes,
    encode_vfs,
    merge_changes,
    reconstructed_changes,
)
from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.common import names, timestamps
from gpuctl.common.names import Phase
from gpuctl.common.unload_rule import unload_verdict

# Seconds between retries of a failed agent request, and between verification polls.
CALL_RETRY_SECONDS = 1.0
VERIFY_POLL_SECONDS = 1.0
EVICT_RETRY_SECONDS = 2.0
MODULE_LIVE = "LIVE"


@dataclass
class StepResult:
    actions: list[Action] = field(default_factory=list)
    # Seconds until this node needs another look without any event (None: events suffice).
    wake_in: float | None = None

    def wake(self, seconds: float) -> None:
        seconds = max(0.05, seconds)
        self.wake_in = seconds if self.wake_in is None else min(self.wake_in, seconds)


def seconds_since(since: str, now: datetime) -> float:
    """Seconds from an RFC 3339 timestamp to now; 0 when it is missing or unreadable."""
    start = timestamps.parse_or_none(since)
    if start is None:
        return 0.0
    return max(0.0, (now - start).total_seconds())


def epoch(moment: datetime) -> float:
    return moment.timestamp()


def duration_words(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 120 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def transition(
    inp: RolloutInput,
    node: NodeFacts,
    to: Phase,
    reason: str,
    *,
    version: str,
    labels: dict[str, str | None] | None = None,
    annotations: dict[str, str | None] | None = None,
    unschedulable: bool | None = None,
    event_kind: EventType = NORMAL,
) -> PatchNode:
    """The write that moves `node` to phase `to` (about `version`), with what goes with it."""
    all_annotations: dict[str, str | None] = {
        names.SINCE: timestamps.format_seconds(inp.now),
        names.REASON: reason,
        names.STATE_VERSION: version,
        names.GPUDRIVER: inp.driver_name,
    }
    all_annotations.update(annotations or {})
    event = None
    if to is not Phase.PENDING:
        words = f"{to.value}: {reason}" if reason else to.value
        event = EventNote(event_kind, f"Rollout{to.value}", f"{version}: {words}")
    return PatchNode(
        node=node.name,
        resource_version=node.resource_version,
        labels={names.STATE_LABEL: to.value, **(labels or {})},
        annotations=all_annotations,
        unschedulable=unschedulable,
        phase_from=node.phase,
        phase_to=to,
        event=event,
    )


def _labelled(inp: RolloutInput, node: NodeFacts, version: str) -> bool:
    return node.labels.get(inp.kmm.version) == version


def blocked(inp: RolloutInput, node: NodeFacts, reason: str, version: str) -> PatchNode:
    """Blocked: released (uncordoned, records dropped) unless the node was already changed."""
    recorded_changes = bool(node.annotations.get(names.PREPARE_CHANGES))
    untouched = not recorded_changes and not _labelled(inp, node, version)
    annotations: dict[str, str | None] = {}
    unschedulable = None
    if untouched:
        annotations.update(dict.fromkeys(names.PASS_DETAIL))
        if node.cordoned_by_us:
            annotations[names.CORDONED_BY_GPUCTL] = None
            unschedulable = False
    return transition(
        inp,
        node,
        Phase.BLOCKED,
        reason,
        version=version,
        annotations=annotations,
        unschedulable=unschedulable,
        event_kind=WARNING,
    )


def failed(
    inp: RolloutInput,
    node: NodeFacts,
    reason: str,
    version: str,
    annotations: dict[str, str | None] | None = None,
) -> PatchNode:
    """Failed: the node keeps its cordon and records, for the admin to look at and retry."""
    return transition(
        inp,
        node,
        Phase.FAILED,
        reason,
        version=version,
        annotations=annotations,
        event_kind=WARNING,
    )


def unfixable_blockers(inp: RolloutInput, report: ReportFacts) -> list[str]:
    """The blockers neither draining nor the allowed preparation can clear, in words.

    The shared unload rule (gpuctl.common.unload_rule) decides: VFs preparation may disable
    block nothing; a holder module always blocks (KMM removes the module first).
    """
    return unload_verdict(report.report, inp.unload_settings).messages()


def _due(call: CallState | None, now: float, every: float) -> bool:
    """True when a request should be (re)sent: never sent, or the last one ended `every` ago."""
    if call is None:
        return True
    if call.in_flight:
        return False
    return call.finished_at is not None and now - call.finished_at >= every


def _ask_report(result: StepResult, node: NodeFacts) -> None:
    result.actions.append(RequestReport(node.name, node.attempt))


# -- Checking -----------------------------------------------------------------------------


def _pass_records(
    node: NodeFacts, report: ReportFacts, module_driver: str
) -> dict[str, str | None]:
    """What the node looked like before anything changes, written only once per pass."""
    records: dict[str, str | None] = {}
    if names.BOUND_BEFORE not in node.annotations:
        records[names.BOUND_BEFORE] = encode_bound(report.bound_to(module_driver))
    if names.VFS_BEFORE not in node.annotations:
        records[names.VFS_BEFORE] = encode_vfs(report.vfs)
    if names.SRCVERSION_BEFORE not in node.annotations:
        live = report.module_state == MODULE_LIVE
        records[names.SRCVERSION_BEFORE] = report.srcversion if live else ""
    return records


def _enter_draining(inp: RolloutInput, node: NodeFacts, report: ReportFacts) -> PatchNode:
    annotations = _pass_records(node, report, inp.module_driver)
    unschedulable = None
    if inp.settings.cordon:
        if node.cordoned_by_us:
            unschedulable = True if not node.unschedulable else None
        elif node.unschedulable:
            annotations[names.CORDONED_BY_GPUCTL] = "false"  # the admin's cordon: keep it
        else:
            annotations[names.CORDONED_BY_GPUCTL] = "true"
            unschedulable = True
    waiting = _drain_words(node)
    reason = "cordoned" if inp.settings.cordon else "not cordoned (rollout.cordon is false)"
    reason += f"; waiting for {waiting}" if waiting else ""
    return transition(
        inp,
        node,
        Phase.DRAINING,
        reason,
        version=_target(inp),
        annotations=annotations,
        unschedulable=unschedulable,
    )


def _target(inp: RolloutInput) -> str:
    assert inp.target_version is not None
    return inp.target_version


def _drain_words(node: NodeFacts) -> str:
    parts = []
    if node.gpu_pods:
        parts.append("GPU pods " + ", ".join(str(p) for p in node.gpu_pods))
    if node.claims:
        parts.append("allocated GPU ResourceClaims " + ", ".join(node.claims))
    return "; ".join(parts)


def step_checking(inp: RolloutInput, node: NodeFacts) -> StepResult:
    result = StepResult()
    version = _target(inp)
    timeout = inp.settings.timeouts.check
    elapsed = seconds_since(node.since, inp.now)
    now = epoch(inp.now)
    if not node.ready:
        result.actions.append(blocked(inp, node, "node is NotReady", version))
        return result
    call = node.call(INSPECT)
    if call is None or not call.answered:
        if elapsed >= timeout:
            why = call.error if call is not None and call.error else "no answer"
            reason = f"no fresh agent report within {duration_words(timeout)}: {why}"
            result.actions.append(blocked(inp, node, reason, version))
            return result
        if _due(call, now, CALL_RETRY_SECONDS):
            _ask_report(result, node)
        result.wake(min(CALL_RETRY_SECONDS, timeout - elapsed))
        return result
    assert call.report is not None
    if node.gpu_pods is None:
        if elapsed >= timeout:
            result.actions.append(blocked(inp, node, "could not list the node's pods", version))
        else:
            result.wake(CALL_RETRY_SECONDS)
        return result
    unfixable = unfixable_blockers(inp, call.report)
    if unfixable and not node.gpu_pods and not node.claims:
        result.actions.append(blocked(inp, node, "; ".join(unfixable), version))
        return result
    result.actions.append(_enter_draining(inp, node, call.report))
    return result


# -- Draining -----------------------------------------------------------------------------


def step_draining(inp: RolloutInput, node: NodeFacts) -> StepResult:
    result = StepResult()
    version = _target(inp)
    timeout = inp.settings.timeouts.drain
    elapsed = seconds_since(node.since, inp.now)
    if inp.settings.cordon and node.cordoned_by_us and not node.unschedulable:
        # Recorded before a restart cut the cordon off, or undone by someone: cordon again.
        result.actions.append(PatchNode(node.name, node.resource_version, unschedulable=True))
        return result
    if node.gpu_pods is None:
        result.wake(CALL_RETRY_SECONDS)
        return result
    waiting = _drain_words(node)
    if not waiting:
        result.actions.append(
            transition(
                inp, node, Phase.PREPARING, "preparing the node for the unload", version=version
            )
        )
        return result
    if elapsed >= timeout:
        hint = "" if inp.settings.evict_gpu_pods or not node.gpu_pods else " (evictGPUPods is off)"
        reason = f"still on the node after {duration_words(timeout)}: {waiting}{hint}"
        result.actions.append(blocked(inp, node, reason, version))
        return result
    if node.gpu_pods and inp.settings.evict_gpu_pods:
        result.actions.append(EvictPods(node.name, node.gpu_pods))
        result.wake(EVICT_RETRY_SECONDS)
    result.wake(timeout - elapsed)
    return result


# -- Preparing ----------------------------------------------------------------------------


def _label_and_load(
    inp: RolloutInput, node: NodeFacts, changes: str | None, reason: str
) -> PatchNode:
    """Record the preparation's changes and set the version label, in one write."""
    version = _target(inp)
    annotations: dict[str, str | None] = {}
    if changes is not None:
        annotations[names.PREPARE_CHANGES] = changes
    return transition(
        inp,
        node,
        Phase.LOADING,
        reason,
        version=version,
        labels={inp.kmm.version: version},
        annotations=annotations,
    )


def _all_changes(
    node: NodeFacts, report: ReportFacts | None, new: list[agent_pb.NodeChange]
) -> str | None:
    """prepare-changes after this preparation: recorded + new + what the states imply."""
    recorded = decode_changes(node.annotations.get(names.PREPARE_CHANGES))
    implied = []
    if report is not None:
        implied = reconstructed_changes(
            decode_vfs(node.annotations.get(names.VFS_BEFORE)),
            report.vfs,
            decode_bound(node.annotations.get(names.BOUND_BEFORE)),
            report.drivers,
        )
    merged = merge_changes(recorded, new, implied)
    if not merged and not recorded:
        return None
    return encode_changes(merged)


def _ask_prepared(
    inp: RolloutInput, node: NodeFacts, kind: str, call: CallState | None
) -> StepResult:
    """Send (or resend) the preparation's request, or fail the node once it timed out."""
    result = StepResult()
    timeout = inp.settings.timeouts.prepare
    elapsed = seconds_since(node.since, inp.now)
    if elapsed >= timeout:
        why = call.error if call is not None and call.error else "no answer"
        what = "PrepareRequest" if kind == PREPARE else "report request"
        reason = f"no answer to the {what} within {duration_words(timeout)}: {why}"
        result.actions.append(failed(inp, node, reason, _target(inp)))
        return result
    if _due(call, epoch(inp.now), CALL_RETRY_SECONDS):
        if kind == PREPARE:
            result.actions.append(
                SendPrepare(
                    node.name,
                    node.attempt,
                    inp.module_driver,
                    allow_unbind=inp.settings.unbind_idle_devices,
                    allow_disable_vfs=inp.settings.disable_idle_vfs,
                    unloaded_with=inp.unloaded_with,
                )
            )
        else:
            _ask_report(result, node)
    result.wake(min(CALL_RETRY_SECONDS, timeout - elapsed))
    return result


def _after_prepare(inp: RolloutInput, node: NodeFacts, prepared: PrepareFacts) -> PatchNode:
    """The agent's PrepareResult decides: load, blocked (nothing changed) or failed."""
    version = _target(inp)
    changes = _all_changes(node, prepared.report, list(prepared.changes))
    if prepared.error:
        annotations: dict[str, str | None] = {names.PREPARE_CHANGES: changes} if changes else {}
        reason = f"preparation failed half way: {prepared.error}"
        return failed(inp, node, reason, version, annotations)
    if not prepared.ready:
        words = "; ".join(b.message for b in prepared.blockers) or "not ready"
        return blocked(inp, node, words, version)
    done = "prepared" + (" (devices changed; restored after the load)" if changes else "")
    return _label_and_load(inp, node, changes, done)


def _after_inspect(inp: RolloutInput, node: NodeFacts, report: ReportFacts) -> PatchNode:
    """Without preparation, a fresh report without blockers lets the load go ahead.

    (disableIdleVFs is off here, so the rule clears no VF: only holders KMM unloads first.)
    """
    version = _target(inp)
    left = unfixable_blockers(inp, report)
    if left:
        return blocked(inp, node, "; ".join(left), version)
    changes = _all_changes(node, report, [])
    return _label_and_load(inp, node, changes, f"nothing holds the devices; KMM loads {version}")


def step_preparing(inp: RolloutInput, node: NodeFacts) -> StepResult:
    result = StepResult()
    if node.gpu_pods is None:
        result.wake(CALL_RETRY_SECONDS)
        return result
    if node.gpu_pods or node.claims:
        reason = f"back to draining: {_drain_words(node)}"
        result.actions.append(transition(inp, node, Phase.DRAINING, reason, version=_target(inp)))
        return result
    kind = PREPARE if inp.settings.prepare_changes_node else INSPECT
    call = node.call(kind)
    if call is None or not call.answered:
        return _ask_prepared(inp, node, kind, call)
    try:
        if call.prepare is not None:
            result.actions.append(_after_prepare(inp, node, call.prepare))
        else:
            assert call.report is not None
            result.actions.append(_after_inspect(inp, node, call.report))
    except RecordError as err:
        result.actions.append(failed(inp, node, str(err), _target(inp)))
    return result


# -- Loading ------------------------------------------------------------------------------


def kmm_loaded(inp: RolloutInput, node: NodeFacts, version: str) -> bool:
    return inp.kmm.ready in node.labels and node.labels.get(inp.kmm.version_ready) == version


def step_loading(inp: RolloutInput, node: NodeFacts) -> StepResult:
    result = StepResult()
    version = node.state_version or _target(inp)
    if not _labelled(inp, node, version):
        result.actions.append(
            PatchNode(node.name, node.resource_version, labels={inp.kmm.version: version})
        )
        return result
    if kmm_loaded(inp, node, version):
        result.actions.append(
            transition(
                inp,
                node,
                Phase.VERIFYING,
                f"KMM reports {version} loaded; verifying with the agent",
                version=version,
            )
        )
        return result
    timeout = inp.settings.timeouts.load
    elapsed = seconds_since(node.since, inp.now)
    if elapsed >= timeout:
        reason = f"KMM did not load {version} within {duration_words(timeout)}"
        result.actions.append(failed(inp, node, reason, version))
    else:
        result.wake(timeout - elapsed)
    return result


# -- Verifying ----------------------------------------------------------------------------


def _normalized_tag(text: str) -> str:
    return re.sub(r"^(xebr_|xeb_)", "", text.strip()).removeprefix("v")


def _srcversion_mismatch(node: NodeFacts, report: ReportFacts) -> str:
    before = node.annotations.get(names.SRCVERSION_BEFORE, "")
    if not report.srcversion:
        return "the loaded module has no srcversion"
    if before and report.srcversion == before:
        return f"srcversion is still {before} (the old module)"
    return ""


def _backport_tag_mismatch(report: ReportFacts, version: str) -> str:
    if not report.backport_tag:
        return "the loaded module has no backport tag (use verifyBy: srcversion)"
    if _normalized_tag(report.backport_tag) != _normalized_tag(version):
        return f"backport tag {report.backport_tag} is not {version}"
    return ""


def module_mismatch(inp: RolloutInput, node: NodeFacts, report: ReportFacts, version: str) -> str:
    """ "" when the loaded module is the expected one, else why not (in words)."""
    if report.module_state != MODULE_LIVE:
        return f"module {inp.module_driver} is {report.module_state}, not live"
    if inp.settings.verify_by == "srcversion":
        return _srcversion_mismatch(node, report)
    return _backport_tag_mismatch(report, version)


def bindings_restored(node: NodeFacts, report: ReportFacts) -> str:
    """ "" when every function bound before is bound to its driver again and VF counts are
    back, else what is missing (in words)."""
    problems = []
    for function in decode_bound(node.annotations.get(names.BOUND_BEFORE)):
        now = report.drivers.get(function.pci_address)
        if now != function.driver:
            state = "absent" if now is None else (now or "unbound")
            problems.append(f"{function.pci_address} not bound to {function.driver} ({state})")
    for pf, count in sorted(decode_vfs(node.annotations.get(names.VFS_BEFORE)).items()):
        now_count = report.vfs.get(pf)
        if now_count != count:
            problems.append(f"{pf} has {now_count} VFs, had {count}")
    return "; ".join(problems)


def _latest_report(
    inspect: CallState | None, restore: CallState | None
) -> tuple[ReportFacts | None, float]:
    best: tuple[ReportFacts | None, float] = (None, -1.0)
    for call in (inspect, restore):
        if call is None or not call.answered or call.finished_at is None:
            continue
        report = call.report
        if call.kind == RESTORE:
            report = call.restore.report if call.restore is not None else None
        if report is not None and call.finished_at > best[1]:
            best = (report, call.finished_at)
    return best


def _done(inp: RolloutInput, node: NodeFacts, version: str, report: ReportFacts) -> PatchNode:
    annotations: dict[str, str | None] = dict.fromkeys(names.PASS_DETAIL)
    annotations[names.CORDONED_BY_GPUCTL] = None  # "false" (the admin's cordon) goes too
    unschedulable = False if node.cordoned_by_us else None
    evidence = (
        f"srcversion {report.srcversion}"
        if inp.settings.verify_by == "srcversion"
        else f"backport tag {report.backport_tag}"
    )
    bound = len(decode_bound(node.annotations.get(names.BOUND_BEFORE)))
    reason = f"verified: {inp.module_driver} live with {evidence}, {bound} function(s) bound"
    return transition(
        inp,
        node,
        Phase.DONE,
        reason,
        version=version,
        annotations=annotations,
        unschedulable=unschedulable,
    )


@dataclass(frozen=True)
class _Verification:
    inp: RolloutInput
    node: NodeFacts
    version: str
    inspect: CallState | None
    restore: CallState | None

    @property
    def elapsed(self) -> float:
        return seconds_since(self.node.since, self.inp.now)

    def not_yet(self, why: str, *, ask: bool = True) -> StepResult:
        """Look again shortly (asking the agent when `ask`), or fail once timed out."""
        result = StepResult()
        timeout = self.inp.settings.timeouts.verify
        if self.elapsed >= timeout:
            reason = f"not verified within {duration_words(timeout)}: {why}"
            result.actions.append(failed(self.inp, self.node, reason, self.version))
            return result
        now = epoch(self.inp.now)
        if ask and _due(self.inspect, now, VERIFY_POLL_SECONDS):
            _ask_report(result, self.node)
        result.wake(min(VERIFY_POLL_SECONDS, timeout - self.elapsed))
        return result

    def restore_step(self) -> StepResult | None:
        """None once the recorded changes are undone (or there are none)."""
        changes = self.node.annotations.get(names.PREPARE_CHANGES, "")
        if not decode_changes(changes):
            return None
        restore, now = self.restore, epoch(self.inp.now)
        if restore is None or (restore.error and _due(restore, now, CALL_RETRY_SECONDS)):
            if self.elapsed >= self.inp.settings.timeouts.verify:
                return self.not_yet("the RestoreRequest was not answered", ask=False)
            result = StepResult()
            result.actions.append(SendRestore(self.node.name, self.node.attempt, changes))
            result.wake(CALL_RETRY_SECONDS)
            return result
        if not restore.answered:
            return self.not_yet(restore.error or "waiting for the restore", ask=False)
        assert restore.restore is not None
        if restore.restore.errors:
            result = StepResult()
            reason = "restore failed: " + "; ".join(restore.restore.errors)
            result.actions.append(failed(self.inp, self.node, reason, self.version))
            return result
        return None


def step_verifying(inp: RolloutInput, node: NodeFacts) -> StepResult:
    check = _Verification(
        inp, node, node.state_version or _target(inp), node.call(INSPECT), node.call(RESTORE)
    )
    report, _ = _latest_report(check.inspect, check.restore)
    if report is None:
        inspect = check.inspect
        return check.not_yet(inspect.error if inspect and inspect.error else "no agent report yet")
    return _verify_report(check, report)


def _verify_report(check: _Verification, report: ReportFacts) -> StepResult:
    inp, node = check.inp, check.node
    try:
        mismatch = module_mismatch(inp, node, report, check.version)
        if mismatch:
            return check.not_yet(mismatch)
        restoring = check.restore_step()
        if restoring is not None:
            return restoring
        missing = bindings_restored(node, report)
    except RecordError as err:
        result = StepResult()
        result.actions.append(failed(inp, node, str(err), check.version))
        return result
    if missing:
        return check.not_yet(missing)
    if not kmm_loaded(inp, node, check.version):
        return check.not_yet("KMM's ready labels are gone", ask=False)
    return StepResult(actions=[_done(inp, node, check.version, report)])


STEPS = {
    Phase.CHECKING: step_checking,
    Phase.DRAINING: step_draining,
    Phase.PREPARING: step_preparing,
    Phase.LOADING: step_loading,
    Phase.VERIFYING: step_verifying,
}
