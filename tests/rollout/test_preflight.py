"""The preflight before the unload (gpuctl/rollout/preflight.py): a node whose kernel enforces
module signatures is Blocked while the target is unsigned, naming why, and goes on once the
GPUDriver signs it or says its images are signed already."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.facts import GpuPod, ReportFacts
from gpuctl.rollout.preflight import signed_for, unsigned_target
from gpuctl.rollout.settings import RolloutSettings
from gpuctl.rollout.steps import step_checking
from tests.support.rollout_samples import (
    KMM,
    answered,
    loaded_labels,
    new_report,
    node,
    rollout,
)

KERNEL = "6.8.0-60-generic"
SIGN = {"keySecret": {"name": "k"}, "certSecret": {"name": "c"}, "filesToSign": ["/opt/x"]}
MAPPINGS = [
    {"regexp": "^6\\.17\\.", "containerImage": "r.example.com/xe:617", "sign": SIGN},
    {"regexp": "^6\\.8\\.", "containerImage": "r.example.com/xe:68"},
]


def enforcing(signatures: int = pb.KernelTrust.SIGNATURES_ENFORCED) -> ReportFacts:
    facts = new_report()
    facts.report.kernel_release = KERNEL
    trust = facts.report.kernel_trust
    trust.secure_boot = pb.KernelTrust.SECURE_BOOT_ENABLED
    trust.lockdown = pb.KernelTrust.LOCKDOWN_INTEGRITY
    trust.sig_enforce = pb.KernelTrust.SIG_ENFORCE_OFF
    trust.signatures = signatures  # type: ignore[assignment]
    return facts


def check(
    report: ReportFacts,
    kernel_module: dict[str, Any],
    pods: tuple[GpuPod, ...] = (),
    **settings: Any,
) -> PatchNode:
    facts = node(phase=Phase.CHECKING, labels=loaded_labels(), pods=pods)
    inp = rollout([facts], settings=RolloutSettings(hold_after_first_node=False, **settings))
    inp = dataclasses.replace(inp, kernel_module=kernel_module)
    [write] = [
        a
        for a in step_checking(inp, answered(facts, report=report)).actions
        if isinstance(a, PatchNode)
    ]
    return write


def test_signed_for_is_the_module_wide_sign_or_that_of_the_mapping_kmm_picks() -> None:
    assert signed_for({"kernelMappings": MAPPINGS}, "6.17.0-7-generic")
    assert not signed_for({"kernelMappings": MAPPINGS}, KERNEL)
    assert signed_for({"kernelMappings": MAPPINGS, "sign": SIGN}, KERNEL)
    assert not signed_for({"kernelMappings": MAPPINGS}, "5.15.0-1-generic")  # no mapping


def test_an_enforcing_node_with_an_unsigned_target_is_blocked_before_the_unload() -> None:
    write = check(enforcing(), {"kernelMappings": MAPPINGS})
    assert write.phase_to is Phase.BLOCKED
    assert write.annotations[names.REASON_KIND] == "unsigned-target"
    assert str(write.annotations[names.REASON]).startswith(
        "the node enforces module signatures (Secure Boot, lockdown integrity) and the target "
    )
    assert f"is not signed for kernel {KERNEL}" in str(write.annotations[names.REASON])
    assert KMM.version not in write.labels  # KMM is not asked for anything: nothing unloads
    # GPU pods on the node change nothing: it is not drained for a target that cannot load.
    busy = check(enforcing(), {"kernelMappings": MAPPINGS}, pods=(GpuPod("ml", "trainer-0"),))
    assert busy.phase_to is Phase.BLOCKED
    assert busy.annotations[names.REASON_KIND] == "unsigned-target"


def test_a_signed_target_or_trusted_images_or_a_node_that_does_not_enforce_go_on() -> None:
    signed = {"kernelMappings": MAPPINGS, "sign": SIGN}
    assert check(enforcing(), signed).phase_to is not Phase.BLOCKED
    trusted = check(enforcing(), {"kernelMappings": MAPPINGS}, trust_image_signatures=True)
    assert trusted.phase_to is not Phase.BLOCKED
    relaxed = enforcing(pb.KernelTrust.SIGNATURES_NOT_ENFORCED)
    assert check(relaxed, {"kernelMappings": MAPPINGS}).phase_to is not Phase.BLOCKED
    # A report that cannot say (an older agent) blocks nothing here.
    unknown = enforcing(pb.KernelTrust.SIGNATURES_UNSPECIFIED)
    assert check(unknown, {"kernelMappings": MAPPINGS}).phase_to is not Phase.BLOCKED


def test_the_words_say_why_the_node_enforces() -> None:
    report = enforcing().report
    report.kernel_trust.lockdown = pb.KernelTrust.LOCKDOWN_NONE
    report.kernel_trust.secure_boot = pb.KernelTrust.SECURE_BOOT_DISABLED
    report.kernel_trust.sig_enforce = pb.KernelTrust.SIG_ENFORCE_ON
    block = unsigned_target(report, {"kernelMappings": MAPPINGS}, trusted=False, version="v1")
    assert block is not None
    assert "(module.sig_enforce=Y)" in block.words
