"""Before anything is unloaded: will the target load on this node at all? (pure)

A node whose kernel enforces module signatures (the agent's KernelTrust verdict: Secure Boot
with lockdown, or module.sig_enforce) refuses an unsigned out-of-tree module, after KMM has
unloaded the old one: the node would be left without a GPU driver. So a node that enforces
signatures is Blocked before the unload when the target is not signed: no `sign` in the
GPUDriver (kernelModule.sign, or that of the mapping KMM picks for the node's kernel, the
first whose regexp matches, in Go's RE2 semantics), unless the admin says the images are
signed already (rollout.trustImageSignatures). A report that does not say (an older agent,
an unreadable lockdown) blocks nothing here: the load's own verification still stands.

What it cannot know yet: whether the key KMM signs with is one the node trusts (the
certificate is in a Secret the coordinator does not read); docs/secure-boot.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.common.targeting import mapping_for
from gpuctl.rollout.holds import Block, BlockKind

_WHY_ENFORCED = {
    pb.KernelTrust.LOCKDOWN_INTEGRITY: "lockdown integrity",
    pb.KernelTrust.LOCKDOWN_CONFIDENTIALITY: "lockdown confidentiality",
}


def signed_for(kernel_module: Mapping[str, Any], kernel: str) -> bool:
    """KMM signs the target's modules for `kernel`: a module-wide `sign`, or one on the
    mapping KMM picks for it (targeting.mapping_for: the first whose regexp matches)."""
    if kernel_module.get("sign"):
        return True
    mapping = mapping_for(kernel, kernel_module.get("kernelMappings") or [])
    return bool(mapping and mapping.get("sign"))


def enforcement_words(trust: pb.KernelTrust) -> str:
    """Why the node enforces signatures, in words ("Secure Boot, lockdown integrity")."""
    parts = []
    if trust.secure_boot == pb.KernelTrust.SECURE_BOOT_ENABLED:
        parts.append("Secure Boot")
    if trust.lockdown in _WHY_ENFORCED:
        parts.append(_WHY_ENFORCED[trust.lockdown])
    if trust.sig_enforce == pb.KernelTrust.SIG_ENFORCE_ON:
        parts.append("module.sig_enforce=Y")
    return ", ".join(parts) or "its kernel"


def unsigned_target(
    report: pb.NodeReport, kernel_module: Mapping[str, Any], *, trusted: bool, version: str
) -> Block | None:
    """The preflight's signature check on one node's report (None: it passes)."""
    trust = report.kernel_trust
    if trusted or trust.signatures != pb.KernelTrust.SIGNATURES_ENFORCED:
        return None
    kernel = report.kernel_release
    if signed_for(kernel_module, kernel):
        return None
    return Block(
        BlockKind.UNSIGNED_TARGET,
        f"the node enforces module signatures ({enforcement_words(trust)}) and the target "
        f"{version} is not signed for kernel {kernel or '(unknown)'}: its load would be "
        "refused after the unload, leaving the node without a driver; sign it in the cluster "
        "(kernelModule.sign, docs/secure-boot.md), or set rollout.trustImageSignatures if "
        "its modules are signed already",
    )
