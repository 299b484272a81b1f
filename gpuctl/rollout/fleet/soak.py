"""The soak (`spec.rollout.soakSeconds`): after a node is verified at the target, the rollout
waits and watches it before the next node starts. Pure.

When a node turns Done at the target, its Done write records a baseline
(names.SOAK_BASELINE: the functions bound to the module's driver, the module's srcversion,
the kernel's taint mask, from the report that verified it) — for the first node of the
target only, or for every node with `soakEachBatch`. While a node has a baseline:

- during `soakSeconds` after its Done, its agent is asked for a report every
  SOAK_POLL_SECONDS; any answer that shows it degraded fails it (`soak: ...`): the module
  not live any more or another srcversion, a function of the baseline no longer bound to its
  driver, a GPU in xe's survivability mode, a kernel taint flag the baseline did not have. A
  failed node counts against the failure budget, and with `onNodeFailure: Rollback` rolls the
  GPUDriver back (decide.py);
- after `soakSeconds`, it passes on a clean answer asked for after the soak ended (with a
  readable taint mask: unknown is not healthy), and the write that drops its baseline
  records that it passed; until then the soak holds.

No new node starts (loads; removals do not wait) while any node soaks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuctl.common import names
from gpuctl.rollout.actions import Action, PatchNode, RequestReport
from gpuctl.rollout.input.facts import INSPECT, NodeFacts, ReportFacts, RolloutInput
from gpuctl.rollout.step.soak_baseline import read_baseline
from gpuctl.rollout.step.writes import MODULE_LIVE, epoch, failed, seconds_since

SOAK_POLL_SECONDS = 1.0
# The kernel's taint flags by bit (Documentation/admin-guide/tainted-kernels.rst).
TAINT_LETTERS = "PFSRMBUDAWCIOELKXTNJ"


def taint_words(mask: int) -> str:
    """ "W (bit 9)" for each flag set in `mask`."""
    flags = []
    for bit in range(mask.bit_length()):
        if mask >> bit & 1:
            letter = TAINT_LETTERS[bit] if bit < len(TAINT_LETTERS) else "?"
            flags.append(f"{letter} (bit {bit})")
    return ", ".join(flags)


def degraded(record: dict[str, Any], report: ReportFacts) -> str:
    """How `report` is worse than the baseline ("" when it is not)."""
    problems = []
    if report.module_state != MODULE_LIVE:
        problems.append(f"{record.get('driver')} is {report.module_state}, not live")
    elif record.get("srcversion") and report.srcversion != record["srcversion"]:
        problems.append(
            f"{record.get('driver')} srcversion is {report.srcversion}, "
            f"verified {record['srcversion']}"
        )
    for address in record.get("bound") or []:
        now = report.drivers.get(str(address))
        if now != record.get("driver"):
            problems.append(f"{address} not bound to {record.get('driver')} ({now or 'unbound'})")
    survivability = report.in_survivability()
    if survivability:
        problems.append(survivability)
    before, tainted = record.get("tainted"), report.kernel_tainted
    if isinstance(before, int) and tainted is not None and tainted & ~before:
        problems.append(f"new kernel taint flag(s): {taint_words(tainted & ~before)}")
    return "; ".join(problems)


@dataclass
class SoakResult:
    actions: list[Action] = field(default_factory=list)
    # Nodes still soaking, with until when (words).
    soaking: list[str] = field(default_factory=list)
    wake_in: float | None = None


def soak(inp: RolloutInput, nodes: list[NodeFacts]) -> SoakResult:
    """The soak of the nodes Done at the target that carry a baseline."""
    result = SoakResult()
    seconds = inp.settings.soak_seconds
    now = epoch(inp.now)
    for node in nodes:
        record = read_baseline(node)
        if record is None:
            continue
        elapsed = seconds_since(node.since, inp.now)
        ended_at = now - elapsed + seconds
        call = node.call(INSPECT)
        report = call.report if call is not None and call.answered else None
        problem = degraded(record, report) if report is not None else ""
        if problem:
            reason = f"soak: {problem}"
            result.actions.append(failed(inp, node, reason, node.state_version))
            result.soaking.append(f"{node.name} (failed it)")  # no node starts on this pass
            continue
        fresh = call is not None and call.finished_at is not None and call.finished_at >= ended_at
        if elapsed >= seconds and fresh and report is not None and _conclusive(record, report):
            result.actions.append(_passed(node))
            continue
        if call is None or (
            call.finished_at is not None and now - call.finished_at >= SOAK_POLL_SECONDS
        ):
            result.actions.append(RequestReport(node.name, node.attempt))
        left = max(0.0, seconds - elapsed)
        result.soaking.append(
            f"{node.name} ({left:.0f}s left)" if left else f"{node.name} (a last report)"
        )
        result.wake_in = min(result.wake_in or SOAK_POLL_SECONDS, SOAK_POLL_SECONDS)
    return result


def _conclusive(record: dict[str, Any], report: ReportFacts) -> bool:
    """A clean report can end the soak only when it tells the taint mask the baseline has."""
    return report.kernel_tainted is not None or record.get("tainted") is None


def _passed(node: NodeFacts) -> PatchNode:
    """The soak passed: its baseline goes (the node stays Done)."""
    return PatchNode(node.name, node.resource_version, annotations={names.SOAK_BASELINE: None})
