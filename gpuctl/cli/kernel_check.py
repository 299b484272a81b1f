"""`gpuctl nodes --kernel-check`: the nodes whose next kernel would come back without a driver.

Each agent reports the kernel its node would boot next (the newest installed one; agent/
next_kernel.py). For every node whose next kernel is not the one it runs, and every GPUDriver
that targets it (the Node's gpuctl.dev/driver-target label), the same verdict as `gpuctl
preflight --kernel` (a mapping, the image through KMM's PreflightValidation: one per distinct
kernel), plus the node's own fact: a node that enforces module signatures fails when the
target is not signed for that kernel, and one whose enforcement is unknown is unknown. The
verdicts are pure (preflight_verdict.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.cli.kmm_preflight import check_images
from gpuctl.cli.kmm_touch import module_ref
from gpuctl.cli.kube_errors import call_api
from gpuctl.cli.node_view import NodeView
from gpuctl.cli.preflight_verdict import ImageCheck, KernelVerdict, Outcome, verdict
from gpuctl.cli.table import format_table
from gpuctl.common import names
from gpuctl.rollout.step.preflight import signed_for, unknown_words

HEADERS = ["NODE", "RUNNING", "NEXT", "GPUDRIVER", "VERDICT", "WHY"]


@dataclass(frozen=True)
class NodeKernelRow:
    node: str
    running: str
    next_kernel: str  # "" when unknown
    driver: str
    outcome: Outcome
    why: str


def pending_kernels(views: Sequence[NodeView]) -> list[tuple[NodeView, str]]:
    """(node, its next kernel or "" when unknown) for nodes that would boot another kernel or
    cannot say which."""
    pending = []
    for view in sorted(views, key=lambda v: v.name):
        report = view.report
        if report is None:
            continue
        upcoming = report.next_kernel.release if report.HasField("next_kernel") else ""
        if upcoming != report.kernel_release:
            pending.append((view, upcoming))
    return pending


def row(
    view: NodeView, upcoming: str, driver: Mapping[str, Any], check: ImageCheck
) -> NodeKernelRow:
    """One node's verdict for one GPUDriver at its next kernel."""
    assert view.report is not None
    running = view.report.kernel_release
    name = str(driver["metadata"]["name"])
    if not upcoming:
        why = "the agent cannot tell which kernel the node boots next"
        return NodeKernelRow(view.name, running, "", name, Outcome.UNKNOWN, why)
    one: KernelVerdict = verdict(driver, upcoming, check)
    if one.outcome is not Outcome.PASS:
        why = one.image_check.words if one.mapping else "no kernel mapping matches it"
        return NodeKernelRow(view.name, running, upcoming, name, one.outcome, why)
    spec = driver.get("spec") or {}
    signatures = view.report.kernel_trust.signatures
    trusted = bool((spec.get("rollout") or {}).get("trustImageSignatures"))
    lax = signatures == pb.KernelTrust.SIGNATURES_NOT_ENFORCED
    if not lax and not trusted and not signed_for(spec.get("kernelModule") or {}, upcoming):
        if signatures == pb.KernelTrust.SIGNATURES_ENFORCED:
            why = "the node enforces module signatures and the driver is not signed for it"
            return NodeKernelRow(view.name, running, upcoming, name, Outcome.FAIL, why)
        why = (
            f"the driver is not signed for it and {unknown_words(view.report)}: whether the "
            "node enforces module signatures is unknown (gpuctl node inspect names the "
            "unreadable file)"
        )
        return NodeKernelRow(view.name, running, upcoming, name, Outcome.UNKNOWN, why)
    return NodeKernelRow(view.name, running, upcoming, name, Outcome.PASS, one.image_check.words)


def render(rows: Sequence[NodeKernelRow]) -> str:
    if not rows:
        return "No node would boot another kernel than the one it runs.\n"
    table = [
        [r.node, r.running, r.next_kernel or "unknown", r.driver, r.outcome.value, r.why]
        for r in rows
    ]
    return format_table(HEADERS, table)


def exit_code(rows: Sequence[NodeKernelRow]) -> int:
    outcomes = {r.outcome for r in rows}
    if Outcome.FAIL in outcomes:
        return 1
    return 3 if Outcome.UNKNOWN in outcomes else 0


def kernel_check(
    api_client: Any,
    views: Sequence[NodeView],
    drivers: Sequence[Mapping[str, Any]],
    *,
    timeout: float,
    now: Callable[[], float],
    sleep: Callable[[float], None],
) -> list[NodeKernelRow]:
    pending = pending_kernels(views)
    targeting = {str(d["metadata"]["name"]): _targeted(api_client, d) for d in drivers}
    asked: dict[str, set[tuple[str, str]]] = {}
    for view, upcoming in pending:
        for driver in drivers:
            ref = module_ref(driver)
            if upcoming and ref and view.name in targeting[str(driver["metadata"]["name"])]:
                asked.setdefault(upcoming, set()).add(ref)
    found = {
        kernel: check_images(api_client, kernel, refs, timeout=timeout, now=now, sleep=sleep)
        for kernel, refs in sorted(asked.items())
    }
    no_module = ImageCheck(None, "the GPUDriver has no Module yet: not checked")
    rows = []
    for view, upcoming in pending:
        for driver in drivers:
            if view.name not in targeting[str(driver["metadata"]["name"])]:
                continue
            ref = module_ref(driver)
            check = found.get(upcoming, {}).get(ref, no_module) if ref else no_module
            rows.append(row(view, upcoming, driver, check))
    return rows


def _targeted(api_client: Any, driver: Mapping[str, Any]) -> set[str]:
    """The nodes the GPUDriver targets now (its gpuctl.dev/driver-target label)."""
    core: Any = client.CoreV1Api(api_client)
    selector = f"{names.TARGET_LABEL}={driver['metadata']['name']}"
    listed: Any = call_api(
        "list",
        "nodes",
        str(api_client.configuration.host),
        lambda: core.list_node(label_selector=selector),
    )
    return {str(node.metadata.name) for node in listed.items}
