"""`gpuctl nodes --kernel-check`'s pure parts (gpuctl/cli/kernel_check.py): which nodes would
boot another kernel, and each one's verdict for a GPUDriver, the node's Secure Boot included."""

from __future__ import annotations

from typing import Any

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.cli.kernel_check import exit_code, pending_kernels, render, row
from gpuctl.cli.node_view import NodeView
from gpuctl.cli.preflight_verdict import ImageCheck, Outcome

FOUND = ImageCheck(True, "KMM: verified image exists")
SIGN = {"keySecret": {"name": "k"}, "certSecret": {"name": "c"}, "filesToSign": ["/opt/x"]}


def view(
    name: str,
    running: str,
    upcoming: str | None,
    *,
    enforced: bool | None = False,
) -> NodeView:
    """A node's view; `enforced` None: its agent could not tell (lockdown unreadable)."""
    report = pb.NodeReport(node_name=name, kernel_release=running)
    if upcoming is not None:
        report.next_kernel.release = upcoming
    trust = report.kernel_trust
    trust.secure_boot = pb.KernelTrust.SECURE_BOOT_NOT_EFI
    trust.sig_enforce = pb.KernelTrust.SIG_ENFORCE_OFF
    trust.lockdown = pb.KernelTrust.LOCKDOWN_NONE
    trust.signatures = pb.KernelTrust.SIGNATURES_NOT_ENFORCED
    if enforced:
        trust.signatures = pb.KernelTrust.SIGNATURES_ENFORCED
    elif enforced is None:
        trust.lockdown = pb.KernelTrust.LOCKDOWN_UNSPECIFIED
        trust.signatures = pb.KernelTrust.SIGNATURES_UNSPECIFIED
    return NodeView(name, True, report, None)


def driver(**kernel_module: Any) -> dict[str, Any]:
    mappings = [{"regexp": "^6\\.17\\.", "containerImage": "r.example.com/xe:$KERNEL_FULL_VERSION"}]
    return {
        "metadata": {"name": "gpu"},
        "spec": {"kernelModule": {"kernelMappings": mappings, **kernel_module}},
    }


def test_only_nodes_that_would_boot_another_kernel_or_cannot_say_are_pending() -> None:
    views = [
        view("c", "6.8.0-60-generic", "6.8.0-60-generic"),
        view("b", "6.8.0-60-generic", None),
        view("a", "6.8.0-60-generic", "6.17.0-9-generic"),
        NodeView("d", None, None, None),
    ]
    assert [(v.name, k) for v, k in pending_kernels(views)] == [
        ("a", "6.17.0-9-generic"),
        ("b", ""),
    ]


def test_a_secure_boot_node_fails_on_an_unsigned_driver_for_its_next_kernel() -> None:
    plain = row(
        view("a", "6.8.0-60-generic", "6.17.0-9-generic"), "6.17.0-9-generic", driver(), FOUND
    )
    assert plain.outcome is Outcome.PASS
    locked = view("s", "6.8.0-60-generic", "6.17.0-9-generic", enforced=True)
    refused = row(locked, "6.17.0-9-generic", driver(), FOUND)
    assert (refused.outcome, refused.why) == (
        Outcome.FAIL,
        "the node enforces module signatures and the driver is not signed for it",
    )
    assert row(locked, "6.17.0-9-generic", driver(sign=SIGN), FOUND).outcome is Outcome.PASS


def test_a_node_whose_enforcement_is_unknown_is_unknown_for_an_unsigned_driver() -> None:
    unsure = view("u", "6.8.0-60-generic", "6.17.0-9-generic", enforced=None)
    verdict = row(unsure, "6.17.0-9-generic", driver(), FOUND)
    assert verdict.outcome is Outcome.UNKNOWN
    assert verdict.why.startswith(
        "the driver is not signed for it and its agent cannot read lockdown: whether the node "
        "enforces module signatures is unknown"
    )
    assert row(unsure, "6.17.0-9-generic", driver(sign=SIGN), FOUND).outcome is Outcome.PASS


def test_no_mapping_unknown_next_kernel_and_the_exit_codes() -> None:
    old = row(view("o", "6.8.0-60-generic", "6.9.0-1-generic"), "6.9.0-1-generic", driver(), FOUND)
    assert (old.outcome, old.why) == (Outcome.FAIL, "no kernel mapping matches it")
    unknown = row(view("u", "6.8.0-60-generic", None), "", driver(), FOUND)
    assert unknown.outcome is Outcome.UNKNOWN
    assert exit_code([unknown]) == 3
    assert exit_code([unknown, old]) == 1
    assert exit_code([]) == 0
    assert render([]) == "No node would boot another kernel than the one it runs.\n"
    assert "unknown" in render([unknown]).splitlines()[1].split()
