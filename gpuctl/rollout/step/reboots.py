"""A node KMM loads that rebooted is verified again before it counts as anything (pure).

A reboot (a kured kernel patch, a crash) brings a node back with whatever loads first: the
kernel's in-tree `xe`, autoloaded by udev, or nothing. KMM sees the new boot id
(`IsNodeRebooted`) and starts a loader whose first act is `modprobe -r` of the in-tree module,
retried until the device is idle — from under a GPU daemon that started on it — while KMM's
ready labels stay on the node throughout. It does so on every node its Module selects with a
version label, whatever phase gpuctl has the node in. So:

- every Done write records the boot it was verified in (names.VERIFIED_BOOT, from the Node's
  `status.nodeInfo`; a node Done before this build gets it recorded on the first pass, and
  the driver-ready label, names.DRIVER_READY_LABEL, likewise);
- a node carrying this GPUDriver's target label and a version label whose `bootID` differs
  from the boot last known of it (names.REBOOT_TAKEN_UP, else names.VERIFIED_BOOT) is taken
  up before anything else in the pass (`reboot_taken_up`), in whatever phase — Done at the
  target or at the version before it waiting for its turn, Pending, Blocked, Skipped, held by
  a window or after the first node, mid-step: it goes to Verifying at the version KMM loads
  there (names.REBOOTED says from which boot to which), cordoned, without the driver-ready
  label (its GPU daemons leave until it is verified again), and KMM's worker held off it (the
  worker hold guard, worker_hold.py) in the same pass: the kubelet posts the new boot id as
  soon as it starts, usually before the node is Ready, and KMM starts no loader before it is.
  A Failed node is held and stays Failed for the admin;
- the agent's answer decides: the module of the version verified (live, out of tree, that
  version's backport tag: the target's, or a recorded revision's) with KMM's labels at the
  version is Done again, and the rollout takes the node on from there; a module that is not it
  and is in use (the in-tree `xe` a daemon opened) keeps KMM's worker held, Blocked
  (BlockKind.REBOOTED_IN_USE), and the node then takes the normal path through the checks
  once idle; one that is not it and is idle, or none, lets KMM's worker go to load it, and
  the verification goes on (a device opened before KMM's loader ran holds it again);
- KMM's worker let go, nothing in use, and KMM not done within timeouts.verify (a pull, an
  in-cluster build or sign for a new kernel, an image not pushed yet): the node waits,
  saying what KMM waits for (`kmm_words`), and spends no failure; a device opened meanwhile
  holds KMM's worker again;
- KMM's worker let go, nothing in use, where KMM will never load: the version label is not the
  Module's and KMM's NodeModulesConfig records no load of the Module there (KMM leaves such a
  node as it is; the entry went with an untolerated taint or an unload):
  the node goes through the checks for the target (`_kmm_loads_nothing`);
- a node not yet at the Module's version that rebooted into another kernel: KMM keeps its
  config for the old kernel there (its label is not the Module's version), so its loader
  would take the in-tree module out and then fail to load for ever (CrashLoopBackOff:
  "Module xe not found in directory .../lib/modules/<new kernel>"). Its worker is never let
  go: the node goes through the checks for the target, which KMM configures for the kernel
  the node runs (`_kmm_config_stale`; the world run found it);
- no agent answer, or what KMM reports loaded not verified, within timeouts.verify: Failed,
  KMM's worker held off it again and its worker Pods deleted (what is live may be in use, or
  nobody can say). A Failed node after a reboot does not roll the GPUDriver back: the boot
  changed, not the version.

What remains, and docs/reboots.md says it: a loader KMM creates in the moment between the
kubelet's Ready and gpuctl's hold (when the kubelet posts the new boot id already Ready) is
deleted by the hold, but may have started; blacklisting the in-tree `xe` closes that.
"""

from __future__ import annotations

from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.gpudriver import revisions
from gpuctl.rollout.actions import DeleteWorkerPods, HoldWorkers, NudgeKmm, PatchNode
from gpuctl.rollout.decision import StepResult
from gpuctl.rollout.event_notes import WARNING
from gpuctl.rollout.input.facts import (
    IN_TREE,
    INSPECT,
    OUT_OF_TREE,
    NodeFacts,
    ReportFacts,
    RolloutInput,
)
from gpuctl.rollout.input.records import BootRecord, RecordError, decode_boot, encode_boot
from gpuctl.rollout.reasons import BlockKind
from gpuctl.rollout.step.verifying import module_mismatch
from gpuctl.rollout.step.worker_hold import WORKER_RECHECK_SECONDS, cleanup, held
from gpuctl.rollout.step.writes import (
    IMAGE_EXISTS,
    MODULE_LIVE,
    VERIFY_POLL_SECONDS,
    ask_report,
    cordon,
    due,
    duration_words,
    epoch,
    failed,
    kmm_loaded,
    not_loaded_in_this_boot,
    removing,
    step_elapsed,
    transition,
    unfixable_block,
)


def _short(boot_id: str) -> str:
    return boot_id[:8]


def boot_change_words(before: BootRecord | None, node: NodeFacts) -> str:
    """ "boot 6f0c2a4e -> 9b1d77c0, kernel 6.8.0-45-generic -> 6.8.0-47-generic"."""
    if before is None:
        return f"boot {_short(node.boot_id)}, the boot it was verified in unknown"
    words = f"boot {_short(before.boot_id)} -> {_short(node.boot_id)}"
    if before.kernel and node.kernel_version and before.kernel != node.kernel_version:
        words += f", kernel {before.kernel} -> {node.kernel_version}"
    elif node.kernel_version:
        words += f", kernel {node.kernel_version}"
    return words


def kmm_boot_version(inp: RolloutInput, node: NodeFacts) -> str:
    """The version KMM loads on the node at its next boot for this GPUDriver: its version
    label where the node carries this GPUDriver's target label ("" where KMM loads nothing)."""
    if node.target_label != inp.driver_name:
        return ""
    return node.labels.get(inp.kmm.version, "")


def reboot_taken_up(inp: RolloutInput, node: NodeFacts) -> tuple[StepResult, Phase, str] | None:
    """A node KMM loads for this GPUDriver that booted again since the boot last known of it
    (the one it was verified in, or the last reboot taken up), in whatever phase: what to do,
    and the phase and version it is in after (None: no such reboot, or none that can be told).

    KMM's loader runs at every new boot of a node its Module selects with a version label
    (IsNodeRebooted), whatever gpuctl thinks of the node: Done, Pending, Blocked, Skipped,
    waiting for a window or its turn, mid-step. So every such node is held and verified
    again at the version KMM loads there; a Failed one is held and stays Failed (the admin's
    `rollout retry` takes it up)."""
    version = kmm_boot_version(inp, node)
    if node.phase is None or not node.boot_id or not version:
        return None
    try:
        known = decode_boot(
            node.annotations.get(names.REBOOT_TAKEN_UP) or node.annotations.get(names.VERIFIED_BOOT)
        )
    except RecordError as err:
        return _taken_up(inp, node, None, f"{err}: verifying it again", version)
    if known is None or known.boot_id == node.boot_id:
        return None
    return _taken_up(inp, node, known, "rebooted", version)


def _taken_up(
    inp: RolloutInput, node: NodeFacts, before: BootRecord | None, why: str, version: str
) -> tuple[StepResult, Phase, str]:
    result = StepResult()
    if node.phase is Phase.FAILED:
        result.actions += _held_failed(inp, node, before)
        return result, Phase.FAILED, node.state_version
    result.actions += _verify_again(inp, node, before, why, version)
    return result, Phase.VERIFYING, version


def boot_recorded(inp: RolloutInput, node: NodeFacts) -> StepResult:
    """A Done node's boot record and driver-ready label, where an older gpuctl did not write
    them (or someone took the label off). The label goes back in the boot the node was
    verified in; a node with no record of that boot is asked: its agent's answer showing the
    module verified and KMM's own record of its load in this boot records the boot, anything
    else verifies it again (held, cordoned): Done is never taken on trust."""
    result = StepResult()
    if node.phase is not Phase.DONE or not node.boot_id:
        return result  # a boot id nobody reports cannot be compared (unknown: nothing done)
    try:
        before = decode_boot(node.annotations.get(names.VERIFIED_BOOT))
    except RecordError:
        return result  # reboot_taken_up verifies it again
    if before is not None:
        adopted = _adopted(node, before)
        if adopted is not None:
            result.actions.append(adopted)
        return result
    return _asked_of_its_boot(inp, node, result)


def _asked_of_its_boot(inp: RolloutInput, node: NodeFacts, result: StepResult) -> StepResult:
    """A Done node without a record of the boot it was verified in (an older build left it):
    its boot recorded on its agent's word and KMM's record of its load in this boot, or it is
    verified again; while either is not read, nothing is written."""
    call = node.call(INSPECT)
    if call is None or not call.answered or call.report is None:
        if due(call, epoch(inp.now), VERIFY_POLL_SECONDS):
            ask_report(result, node)
        result.wake(VERIFY_POLL_SECONDS)
        return result
    if node.kmm_boot_id is None:
        result.wake(VERIFY_POLL_SECONDS)  # KMM's record not read: neither recorded nor doubted
        return result
    why = module_mismatch(inp, node, call.report) or not_loaded_in_this_boot(node)
    if why:
        reason = f"the boot it was verified in is not recorded and {why}"
        result.actions += _verify_again(inp, node, None, reason, node.state_version)
    else:
        result.actions.append(_adopted(node, None) or _record_only(node))
    return result


def _record_only(node: NodeFacts) -> PatchNode:
    annotations: dict[str, str | None] = {names.VERIFIED_BOOT: _this_boot(node)}
    return PatchNode(node.name, node.resource_version, annotations=annotations)


def _adopted(node: NodeFacts, before: BootRecord | None) -> PatchNode | None:
    """What a Done node in the boot it was verified in lacks that an older gpuctl did not
    write (or someone took off): its boot record, the driver-ready label (None: nothing)."""
    annotations: dict[str, str | None] = {}
    labels: dict[str, str | None] = {}
    if before is None:
        annotations[names.VERIFIED_BOOT] = encode_boot(
            BootRecord(node.boot_id, node.kernel_version)
        )
    if node.labels.get(names.DRIVER_READY_LABEL) != names.DRIVER_READY_VALUE:
        labels[names.DRIVER_READY_LABEL] = names.DRIVER_READY_VALUE
    if not annotations and not labels:
        return None
    return PatchNode(node.name, node.resource_version, labels=labels, annotations=annotations)


def _this_boot(node: NodeFacts) -> str:
    return encode_boot(BootRecord(node.boot_id, node.kernel_version))


def _verify_again(
    inp: RolloutInput, node: NodeFacts, before: BootRecord | None, why: str, version: str
) -> list[PatchNode | HoldWorkers]:
    change = boot_change_words(before, node)
    annotations: dict[str, str | None] = {
        names.REBOOTED: change,
        names.KMM_WORKER_HELD: version,
        names.KMM_WORKER_RELEASED: None,
        names.REBOOT_TAKEN_UP: _this_boot(node),
    }
    was = f" while {node.phase.value}" if node.phase not in (None, Phase.DONE) else ""
    reason = (
        f"{why}{was} ({change}): KMM's worker is held off the node and the node cordoned until "
        f"its agent shows the out-of-tree {inp.module_driver} live again"
    )
    write = transition(
        inp,
        node,
        Phase.VERIFYING,
        reason,
        version=version,
        labels={names.DRIVER_READY_LABEL: None},  # GPU daemons leave until it is verified
        annotations=annotations,
        unschedulable=cordon(node, annotations),
        event_kind=WARNING,
    )
    return [HoldWorkers(node.name, held=True), write]


def _held_failed(
    inp: RolloutInput, node: NodeFacts, before: BootRecord | None
) -> list[PatchNode | HoldWorkers | DeleteWorkerPods]:
    """A Failed node rebooted: KMM's worker held off it (its loader would remove whatever the
    boot brought up), the boot taken up, the node left Failed for the admin."""
    change = boot_change_words(before, node)
    reason = (
        f"{node.reason} (rebooted since: {change}; KMM's worker is held off the node until "
        "`gpuctl rollout retry`)"
    )
    annotations: dict[str, str | None] = {
        names.REASON: reason,
        names.KMM_WORKER_HELD: node.state_version or kmm_boot_version(inp, node),
        names.KMM_WORKER_RELEASED: None,
        names.REBOOT_TAKEN_UP: _this_boot(node),
    }
    write = PatchNode(
        node.name,
        node.resource_version,
        labels={names.DRIVER_READY_LABEL: None},
        annotations=annotations,
    )
    return [HoldWorkers(node.name, held=True), write, DeleteWorkerPods(node.name)]


def _autoload_words(inp: RolloutInput, report: ReportFacts) -> str:
    """A warning when the agent says the in-tree module loads by itself at boot ("" else)."""
    autoload = report.report.in_tree_autoload
    if autoload.state != report_pb.InTreeAutoload.AUTOLOADS:
        return ""
    sources = f" ({'; '.join(autoload.sources)})" if autoload.sources else ""
    return (
        f"; WARNING: the in-tree {inp.module_driver} loads by itself at boot{sources}: "
        "blacklist it (docs/reboots.md)"
    )


def user_version_of(inp: RolloutInput, kmm_version: str) -> str:
    """The spec's `version` a KMM version was made of: the target's, or a recorded
    revision's ("" when neither says: the build is then told by its srcversion)."""
    if kmm_version == inp.target_version:
        return inp.module_version
    for entry in inp.revisions:
        if entry.get(revisions.VERSION) == kmm_version:
            return str((entry.get(revisions.KERNEL_MODULE) or {}).get("version") or "")
    return ""


def not_the_verified_module(inp: RolloutInput, node: NodeFacts, report: ReportFacts) -> str:
    """Why the live module is not the one verified before the reboot ("" when it is): live,
    out of tree (an unknown provenance is not taken for it), and the build of the version
    the node is verified at (the target's, or an older revision's for a node the rollout
    has not reached yet)."""
    if report.module_state == MODULE_LIVE and report.provenance != OUT_OF_TREE:
        if report.provenance == IN_TREE:
            return f"module {inp.module_driver} is the kernel's in-tree one"
        return f"module {inp.module_driver} cannot be told apart from the in-tree one"
    return module_mismatch(inp, node, report, user_version_of(inp, node.state_version))


def step_reverifying(inp: RolloutInput, node: NodeFacts) -> StepResult:
    """Verifying after a reboot (names.REBOOTED on the node)."""
    result = StepResult()
    version = node.state_version
    if held(node) and node.unfinished_workers:
        result.actions += [HoldWorkers(node.name, held=True), DeleteWorkerPods(node.name)]
        result.wake(WORKER_RECHECK_SECONDS)
    call = node.call(INSPECT)
    report = call.report if call is not None and call.answered else None
    if report is None:
        if call is not None and call.in_flight and _waiting_for_kmm(node):
            # Asked again while KMM is let finish (an answer of this boot let it go): wait for
            # this answer; judging the node on the unanswered ask would fail it past
            # timeouts.verify for no reason (CI saw it on a loaded machine).
            result.wake(VERIFY_POLL_SECONDS)
            return result
        why = call.error if call is not None and call.error else "no agent report since the boot"
        return _not_yet(inp, node, result, why)
    mismatch = not_the_verified_module(inp, node, report)
    if not mismatch and not kmm_loaded(inp, node, version):
        waiting = _waiting_for_kmm(node)
        return _not_yet(inp, node, result, "KMM's ready labels are gone", ask=False, kmm=waiting)
    # The module verified, but not loaded by KMM in this boot (a host copy of the same build,
    # a loader killed after insmod): KMM's loader will run there, so it is let go while the
    # module is idle, and held (Blocked) while it is in use, as for any other module.
    mismatch = mismatch or not_loaded_in_this_boot(node)
    if not mismatch:
        result.actions.append(_done_again(inp, node, report))
        return result
    in_use = unfixable_block(inp, report, node) if report.module_state == MODULE_LIVE else None
    if in_use is not None and (held(node) or names.KMM_WORKER_RELEASED in node.annotations):
        result.actions += _held_while_in_use(inp, node, mismatch, in_use.words, report)
        return result
    return _idle_and_not_verified(inp, node, result, mismatch)


def _idle_and_not_verified(
    inp: RolloutInput, node: NodeFacts, result: StepResult, mismatch: str
) -> StepResult:
    """Not the verified module, nothing in use: KMM's loader is let go, unless KMM's config
    can never load here (then through the checks for the target, the worker still held)."""
    stale = _kmm_config_stale(inp, node)
    if stale:
        result.actions.append(_checked_for_the_target(inp, node, stale))
        return result
    if held(node):
        result.actions += _let_go(inp, node, mismatch)
        return result
    return _left_to_kmm(inp, node, result, mismatch)


def _left_to_kmm(inp: RolloutInput, node: NodeFacts, result: StepResult, why: str) -> StepResult:
    """KMM's worker let go, nothing in use: KMM loads (nudged while it makes no worker), or,
    where it never will, the node goes through the checks for the target."""
    stale = _kmm_loads_nothing(inp, node)
    if stale and _waiting_for_kmm(node):
        result.actions.append(_checked_for_the_target(inp, node, stale))
        return result
    if names.KMM_WORKER_RELEASED in node.annotations and not node.unfinished_workers:
        result.actions.append(NudgeKmm(node.name))
    return _not_yet(inp, node, result, why, kmm=_waiting_for_kmm(node))


def _kmm_loads_nothing(inp: RolloutInput, node: NodeFacts) -> str:
    """Why KMM will load nothing on the node, let go as it is ("" when it may): its version
    label is not the Module's version and its NodeModulesConfig records no load of the Module
    (KMM's module reconciler leaves a node whose label names another version as it is,
    prepareNodeSchedulingData, so nothing there is ever loaded again: its entry went with an
    untolerated taint or an unload)."""
    target = inp.target_for(node)
    label = node.labels.get(inp.kmm.version, "")
    if removing(target) or not inp.module_ready or not label or label == target:
        return ""
    if node.kmm_boot_id != "":  # a load recorded, or the record not read: KMM may act
        return ""
    return (
        f"KMM loads nothing here at {label} (not the Module's version, and its "
        "NodeModulesConfig records no load of the Module)"
    )


def _kmm_config_stale(inp: RolloutInput, node: NodeFacts) -> str:
    """Why KMM's loader can never load on the node as KMM configures it ("" when it may): its
    NodeModulesConfig configures the Module for another kernel than the one the node runs,
    and its version label is not the Module's, so KMM never writes that config again
    (gpuctl/rollout/input/kmm_boots.py)."""
    target = inp.target_for(node)
    label = node.labels.get(inp.kmm.version, "")
    if removing(target) or not inp.module_ready or not label or label == target:
        return ""
    running = node.kernel_version.removesuffix("+")
    if not node.kmm_kernel or not running or node.kmm_kernel == running:
        return ""  # no config, not read, or for this kernel
    return (
        f"KMM configures {label} for kernel {node.kmm_kernel}, not the {running} it booted, "
        "and writes no other config while the node is not at the Module's version"
    )


def _checked_for_the_target(inp: RolloutInput, node: NodeFacts, why: str) -> PatchNode:
    """A rebooted node KMM will load nothing on, nothing in use: onto the normal path at the
    target, through the checks (cordon kept)."""
    target = inp.target_for(node)
    reason = (
        f"rebooted ({node.annotations.get(names.REBOOTED, '')}); {why}: checking the node "
        f"for {target} (cordon kept)"
    )
    return transition(inp, node, Phase.CHECKING, reason, version=target)


def _waiting_for_kmm(node: NodeFacts) -> bool:
    """KMM's worker is let go and nothing on the node is in use (the caller checked): what
    is left is KMM's (a pull, an in-cluster build or sign, an image not pushed yet)."""
    return names.KMM_WORKER_RELEASED in node.annotations


def kmm_words(node: NodeFacts) -> str:
    """What KMM is doing for the node, from its own objects
    (gpuctl/rollout/input/kmm_activity.py)."""
    if node.image_state and node.image_state != IMAGE_EXISTS:
        image = node.target_image or "its image"
        return f"KMM's ModuleImagesConfig says {node.image_state} of {image}"
    if node.kmm_activity:
        return f"KMM: {node.kmm_activity}"
    if not node.image_state and node.target_image:
        return f"KMM has not found image {node.target_image} yet (its pull, build or sign)"
    return "KMM has not loaded it yet"


def _not_yet(
    inp: RolloutInput,
    node: NodeFacts,
    result: StepResult,
    why: str,
    *,
    ask: bool = True,
    kmm: bool = False,
) -> StepResult:
    """Look again shortly; past timeouts.verify: waiting on KMM with nothing in use (`kmm`),
    the node waits on, saying what KMM does, and spends no failure (KMM being slow is not the
    node failing); anything else fails, KMM's worker held off it."""
    timeout = inp.settings.timeouts.verify
    elapsed = step_elapsed(node.since, inp.now, inp.observed_for)
    if elapsed >= timeout and kmm:
        waited = (
            f"rebooted ({node.annotations.get(names.REBOOTED, '')}); {why}; nothing holds the "
            f"device, so KMM is let finish: {kmm_words(node)} (past timeouts.verify, "
            f"{duration_words(timeout)})"
        )
        if node.reason != waited:
            result.actions.append(
                PatchNode(node.name, node.resource_version, annotations={names.REASON: waited})
            )
    elif elapsed >= timeout:
        reason = (
            f"not verified within {duration_words(timeout)} after the reboot "
            f"({node.annotations.get(names.REBOOTED, '')}): {why}"
        )
        # KMM's worker held off it (again): what is live may be in use, or nobody can say.
        held_again = {names.KMM_WORKER_HELD: node.state_version, names.KMM_WORKER_RELEASED: None}
        write = failed(inp, node, reason, node.state_version, held_again)
        result.actions = [HoldWorkers(node.name, held=True), write, DeleteWorkerPods(node.name)]
        return result
    if ask and due(node.call(INSPECT), epoch(inp.now), VERIFY_POLL_SECONDS):
        ask_report(result, node)
    left = timeout - elapsed
    result.wake(VERIFY_POLL_SECONDS if left <= 0 else min(VERIFY_POLL_SECONDS, left))
    return result


def _done_again(inp: RolloutInput, node: NodeFacts, report: ReportFacts) -> PatchNode:
    annotations: dict[str, str | None] = {
        names.KMM_WORKER_HELD: None,
        names.KMM_WORKER_RELEASED: None,
        names.CORDONED_BY_GPUCTL: None,
    }
    reason = (
        f"verified again after the reboot ({node.annotations.get(names.REBOOTED, '')}): "
        f"the out-of-tree {inp.module_driver} is live (srcversion {report.srcversion})"
        + _autoload_words(inp, report)
    )
    return transition(
        inp,
        node,
        Phase.DONE,
        reason,
        version=node.state_version,
        annotations=annotations,
        unschedulable=False if node.cordoned_by_us else None,
    )


def rebooted_in_use(node: NodeFacts) -> bool:
    """Blocked by what a reboot brought up, in use (`_held_while_in_use`)."""
    return node.phase is Phase.BLOCKED and node.reason_kind is BlockKind.REBOOTED_IN_USE


def step_blocked_after_reboot(inp: RolloutInput, node: NodeFacts) -> StepResult:
    """Blocked by what the boot brought up, in use: KMM's worker stays held (its Pods deleted
    as KMM makes them) and the agent is asked again now and then; once nothing holds the
    device, the node is verified again at the version KMM loads there, which lets KMM's
    worker go. Neither the target's checks nor another version: an opted-out node, or one
    the rollout has not reached, keeps the driver it had."""
    result = cleanup(node)
    call = node.call(INSPECT)
    now = epoch(inp.now)
    report = call.report if call is not None and call.answered else None
    in_use = (
        unfixable_block(inp, report, node)
        if report is not None and report.module_state == MODULE_LIVE
        else None
    )
    if report is not None and in_use is None:
        result.actions.append(_idle_again(inp, node))
        return result
    if due(call, now, inp.blocked_recheck_seconds):
        ask_report(result, node)
    result.wake(inp.blocked_recheck_seconds)
    return result


def _idle_again(inp: RolloutInput, node: NodeFacts) -> PatchNode:
    taken = node.annotations.get(names.REBOOT_TAKEN_UP)
    try:
        boot = decode_boot(taken)
    except RecordError:
        boot = None
    words = f"boot {_short(boot.boot_id)}" if boot is not None else "the last boot"
    return transition(
        inp,
        node,
        Phase.VERIFYING,
        f"nothing holds what {words} brought up any more: verifying the node again",
        version=node.state_version,
        annotations={names.REBOOTED: f"{words}, in use until now"},
    )


def _held_while_in_use(
    inp: RolloutInput, node: NodeFacts, mismatch: str, holders: str, report: ReportFacts
) -> list[PatchNode | HoldWorkers | DeleteWorkerPods]:
    reason = (
        f"rebooted ({node.annotations.get(names.REBOOTED, '')}); {mismatch}, in use: "
        f"{holders}. KMM's loader would remove it from under them: KMM's worker is held off "
        "the node until it is checked idle" + _autoload_words(inp, report)
    )
    blocked = transition(
        inp,
        node,
        Phase.BLOCKED,
        reason,
        version=node.state_version,
        annotations={
            names.KMM_WORKER_HELD: node.state_version,
            names.KMM_WORKER_RELEASED: None,
            names.REASON_KIND: BlockKind.REBOOTED_IN_USE.value,
        },
        event_kind=WARNING,
    )
    return [HoldWorkers(node.name, held=True), blocked, DeleteWorkerPods(node.name)]


def _let_go(inp: RolloutInput, node: NodeFacts, mismatch: str) -> list[PatchNode]:
    """Nothing holds what the boot brought up (or nothing is loaded): KMM's worker let go to
    load the out-of-tree module (the hold goes just before this write, decide.py)."""
    reason = (
        f"rebooted ({node.annotations.get(names.REBOOTED, '')}); {mismatch}, and nothing "
        f"holds it: KMM's worker is let go to load the out-of-tree {inp.module_driver}"
    )
    annotations: dict[str, str | None] = {
        names.KMM_WORKER_HELD: None,
        names.KMM_WORKER_RELEASED: "true",
    }
    write = transition(
        inp, node, Phase.VERIFYING, reason, version=node.state_version, annotations=annotations
    )
    return [write]
