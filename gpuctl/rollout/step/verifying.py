"""The Verifying step (pure): the agent confirms what KMM did, then the node is done.

On the load path the loaded module must be the one asked for: live, and with `verifyBy:
backportTag` its backport tag is the user's `kernelModule.version` (not the Module's KMM
version, which only names the configuration); without a `kernelModule.version`, or with
`verifyBy: srcversion`, its srcversion differs from the one recorded before the pass. A GPU
that xe put in survivability mode (its firmware failed) fails the node at once: it is bound,
but serves nothing until a firmware flash. The changes preparation made are restored
(RestoreRequest), every function bound before is bound again, and KMM still reports the
version loaded. Then the driver-ready label goes back and the
node waits (rollout.pause.timeout at most) for its paused GPU daemons
(gpuctl/rollout/step/pause.py): Done, uncordoned, records dropped.

On the removal path the agent must report the module not loaded and KMM's ready label must be
gone: then the node leaves the rollout (state label and annotations removed, our cordon
lifted). What preparation changed is not restored there: with the driver gone there is
nothing to bind functions to or to enable VFs with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuctl.common import names, timestamps
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode, SendRestore
from gpuctl.rollout.decision import StepResult
from gpuctl.rollout.event_notes import NORMAL, WARNING
from gpuctl.rollout.input.facts import (
    IN_TREE,
    INSPECT,
    RESTORE,
    CallState,
    NodeFacts,
    ReportFacts,
    RolloutInput,
)
from gpuctl.rollout.input.records import RecordError, decode_bound, decode_changes, decode_vfs
from gpuctl.rollout.step.pause import PAUSE_POLL_SECONDS, not_back, recorded
from gpuctl.rollout.step.soak_baseline import baseline
from gpuctl.rollout.step.writes import (
    CALL_RETRY_SECONDS,
    MODULE_LIVE,
    MODULE_NOT_LOADED,
    VERIFY_POLL_SECONDS,
    ask_report,
    due,
    duration_words,
    epoch,
    failed,
    kmm_loaded,
    leave,
    not_loaded_in_this_boot,
    removing,
    seconds_since,
    step_elapsed,
    transition,
)


def _normalized_tag(text: str) -> str:
    return re.sub(r"^(xebr_|xeb_)", "", text.strip()).removeprefix("v")


def _srcversion_mismatch(node: NodeFacts, report: ReportFacts, *, required: bool) -> str:
    """Why the srcversion does not show a new module ("" when it does). `required`: a module
    without a srcversion does not pass (verifyBy: srcversion)."""
    before = node.annotations.get(names.SRCVERSION_BEFORE, "")
    if not report.srcversion and required:
        return "the loaded module has no srcversion"
    if before and report.srcversion == before and not same_image_reloaded(node):
        return f"srcversion is still {before} (the old module)"
    return ""


def same_image_reloaded(node: NodeFacts) -> bool:
    """The pass reloaded the image the node ran before (a config-only change, e.g. new
    `parameters`): the same build, so the same srcversion is the expected one."""
    before = node.annotations.get(names.IMAGE_BEFORE, "")
    return bool(before) and before == node.annotations.get(names.DRIVER_IMAGE)


def _backport_tag_mismatch(report: ReportFacts, version: str) -> str:
    if not report.backport_tag:
        return "the loaded module has no backport tag (use verifyBy: srcversion)"
    if _normalized_tag(report.backport_tag) != _normalized_tag(version):
        return f"backport tag {report.backport_tag} is not {version}"
    return ""


def _by_srcversion(inp: RolloutInput) -> bool:
    return inp.settings.verify_by == "srcversion" or not inp.module_version


def module_mismatch(
    inp: RolloutInput, node: NodeFacts, report: ReportFacts, user_version: str | None = None
) -> str:
    """ "" when the loaded module is the expected one, else why not (in words). The expected
    one is the spec's `version` (`user_version` for another revision's)."""
    if report.module_state != MODULE_LIVE:
        return f"module {inp.module_driver} is {report.module_state}, not live"
    if report.provenance == IN_TREE:
        # KMM loads its own build: the kernel's module (autoloaded, say) is never the target.
        return f"module {inp.module_driver} is the kernel's in-tree one"
    version = inp.module_version if user_version is None else user_version
    if inp.settings.verify_by == "srcversion" or not version:
        required = inp.settings.verify_by == "srcversion"
        return _srcversion_mismatch(node, report, required=required)
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
        if _by_srcversion(inp)
        else f"backport tag {report.backport_tag}"
    )
    # The soak's baseline (decide.py keeps it only on the nodes that soak). The soak watches a
    # driver this step had KMM load: a node verified in place (KMM had loaded the version
    # before the rollout reached it, as an untouched node's is after a rollback) went through
    # no Checking (no SRCVERSION_BEFORE) and does not soak, nor hold the fleet while it would.
    loaded_here = names.SRCVERSION_BEFORE in node.annotations
    soaks = inp.settings.soak_seconds > 0 and loaded_here
    annotations[names.SOAK_BASELINE] = baseline(inp.module_driver, report) if soaks else None
    bound = len(decode_bound(node.annotations.get(names.BOUND_BEFORE)))
    reason = f"verified: {inp.module_driver} live with {evidence}, {bound} function(s) bound"
    missing = not_back(node)
    if missing:
        waited = duration_words(inp.settings.pause.timeout)
        reason += f"; WARNING: paused pods not back and Ready after {waited}: " + ", ".join(missing)
    elif recorded(node).owners:
        reason += "; paused pods back: " + ", ".join(recorded(node).owners)
    return transition(
        inp,
        node,
        Phase.DONE,
        reason,
        version=version,
        annotations=annotations,
        unschedulable=unschedulable,
        event_kind=WARNING if missing else NORMAL,
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
        return step_elapsed(self.node.since, self.inp.now, self.inp.observed_for)

    def not_yet(self, why: str, *, ask: bool = True) -> StepResult:
        """Look again shortly (asking the agent when `ask`), or fail once timed out."""
        result = StepResult()
        timeout = self.inp.settings.timeouts.verify
        if self.elapsed >= timeout:
            reason = f"not verified within {duration_words(timeout)}: {why}"
            result.actions.append(failed(self.inp, self.node, reason, self.version))
            return result
        now = epoch(self.inp.now)
        if ask and due(self.inspect, now, VERIFY_POLL_SECONDS):
            ask_report(result, self.node)
        result.wake(min(VERIFY_POLL_SECONDS, timeout - self.elapsed))
        return result

    def restore_step(self) -> StepResult | None:
        """None once the recorded changes are undone (or there are none)."""
        changes = self.node.annotations.get(names.PREPARE_CHANGES, "")
        if not decode_changes(changes):
            return None
        restore, now = self.restore, epoch(self.inp.now)
        if restore is None or (restore.error and due(restore, now, CALL_RETRY_SECONDS)):
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
    version = node.state_version or inp.target_for(node)
    check = _Verification(inp, node, version, node.call(INSPECT), node.call(RESTORE))
    report, _ = _latest_report(check.inspect, check.restore)
    if report is None:
        inspect = check.inspect
        return check.not_yet(inspect.error if inspect and inspect.error else "no agent report yet")
    if removing(version):
        return _verify_removal(check, report)
    return _verify_report(check, report)


def _verify_report(check: _Verification, report: ReportFacts) -> StepResult:
    inp, node = check.inp, check.node
    try:
        mismatch = module_mismatch(inp, node, report)
        # A GPU in survivability mode is not transient: only a firmware flash ends it.
        failure = "" if mismatch else report.in_survivability()
        restoring = None if mismatch or failure else check.restore_step()
        decided = mismatch or failure or restoring is not None
        missing = "" if decided else bindings_restored(node, report)
    except RecordError as err:
        mismatch, failure, restoring, missing = "", str(err), None, ""
    if failure:
        return StepResult(actions=[failed(inp, node, failure, check.version)])
    if mismatch:
        return check.not_yet(mismatch)
    if restoring is not None:
        return restoring
    if missing:
        return check.not_yet(missing)
    kmm_says = "" if kmm_loaded(inp, node, check.version) else "KMM's ready labels are gone"
    kmm_says = kmm_says or not_loaded_in_this_boot(node)
    if kmm_says:
        return check.not_yet(kmm_says, ask=False)
    return _resume_step(inp, node) or StepResult(actions=[_done(inp, node, check.version, report)])


def _resume_step(inp: RolloutInput, node: NodeFacts) -> StepResult | None:
    """Verified: the driver-ready label goes back, and the node (still cordoned) waits for a
    pod of each paused controller to be back and Ready (gpuctl/rollout/step/pause.py), at most
    rollout.pause.timeout. None once they are, or the wait is over: the node is Done."""
    missing = not_back(node)
    if not missing:
        return None
    result = StepResult()
    resumed_at = node.annotations.get(names.CLIENTS_RESUMED_AT)
    timeout = inp.settings.pause.timeout
    if not resumed_at:
        result.actions.append(
            PatchNode(
                node.name,
                node.resource_version,
                labels={names.DRIVER_READY_LABEL: names.DRIVER_READY_VALUE},
                annotations={names.CLIENTS_RESUMED_AT: timestamps.format_seconds(inp.now)},
            )
        )
        result.wake(min(PAUSE_POLL_SECONDS, timeout))
        return result
    waited = seconds_since(resumed_at, inp.now)
    if waited >= timeout:
        return None
    result.wake(min(PAUSE_POLL_SECONDS, timeout - waited))
    return result


def _verify_removal(check: _Verification, report: ReportFacts) -> StepResult:
    """The agent says the module is not loaded and KMM's ready label is gone: the node
    leaves the rollout."""
    inp, node = check.inp, check.node
    if report.module_state != MODULE_NOT_LOADED:
        return check.not_yet(f"module {inp.module_driver} is {report.module_state}, not unloaded")
    if inp.kmm.ready in node.labels:
        return check.not_yet("KMM's ready label is still on the node", ask=False)
    reason = f"verified: {inp.module_driver} unloaded; the node left GPUDriver {inp.driver_name}"
    return StepResult(actions=[leave(inp, node, reason, "RolloutRemoved")])
