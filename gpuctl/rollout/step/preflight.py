"""Before anything is unloaded: will the target load on this node at all? (pure)

A node whose kernel enforces module signatures (the agent's KernelTrust verdict: Secure Boot
with lockdown, or module.sig_enforce) refuses an unsigned out-of-tree module, after KMM has
unloaded the old one: the node would be left without a GPU driver. So a node that enforces
signatures is Blocked before the unload when the target is not signed: no `sign` in the
GPUDriver (kernelModule.sign, or that of the mapping KMM picks for the node's kernel, the
first whose regexp matches, in Go's RE2 semantics), unless the admin says the images are
signed already (rollout.trustImageSignatures). A target KMM signs is Blocked the same way
when the node does not trust the key, or when that cannot be told
(gpuctl/rollout/input/signing_key.py: the certSecret's certificate against the keys the node's
kernel verifies modules with). A report that does not say whether signatures are enforced (an older
agent, efivarfs or securityfs not mounted, an unreadable lockdown or sig_enforce) is never taken as
"not enforced": the same checks run, and a target they cannot clear Blocks the node with the kind
`signatures-unknown`, naming what is unknown and how to find out.

A node whose kernel refuses every load of the module (the agent's in-tree autoload verdict
DISABLED: `nomodeset`, which xe honours at init, `module_blacklist=xe`, an `install xe
/bin/false`) would refuse KMM's out-of-tree build too, after the unload: Blocked
(`driver-disabled`), naming what disables it (`disabled_block`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.gpudriver.targeting import mapping_for
from gpuctl.rollout.input.signing_key import SigningCertificate, cert_secret_for, untrusted_words
from gpuctl.rollout.reasons import Block, BlockKind

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


def unknown_words(report: pb.NodeReport) -> str:
    """What the agent could not tell of the node's kernel, in words ("" when it told all)."""
    if not report.HasField("kernel_trust"):
        return "its agent reports nothing of the kernel's module signing (an older agent)"
    trust = report.kernel_trust
    unknown = [
        name
        for name, value in (
            ("Secure Boot", trust.secure_boot == pb.KernelTrust.SECURE_BOOT_UNSPECIFIED),
            ("lockdown", trust.lockdown == pb.KernelTrust.LOCKDOWN_UNSPECIFIED),
            ("module.sig_enforce", trust.sig_enforce == pb.KernelTrust.SIG_ENFORCE_UNSPECIFIED),
        )
        if value
    ]
    return f"its agent cannot read {', '.join(unknown) or 'whether signatures are enforced'}"


_FIND_OUT = (
    "find out with `gpuctl node inspect` (the agent's warnings name the unreadable file: it "
    "needs the host's /sys with efivarfs and securityfs mounted, as the chart mounts it)"
)


def disabled_block(report: pb.NodeReport, module: str) -> Block | None:
    """The node's kernel refuses every load of `module` (None when the agent does not say so;
    an unknown verdict is the signature check's and the checks' to weigh, not a refusal)."""
    autoload = report.in_tree_autoload
    if autoload.state != pb.InTreeAutoload.DISABLED:
        return None
    why = "; ".join(autoload.sources) or "the agent says so"
    return Block(
        BlockKind.DRIVER_DISABLED,
        f"the node refuses every load of {module} ({why}): the unload would leave it without "
        "a driver; take that off the node's boot configuration (and reboot), then it goes on",
    )


def signature_block(
    report: pb.NodeReport,
    kernel_module: Mapping[str, Any],
    certificates: Mapping[str, SigningCertificate],
    *,
    trusted: bool,
    version: str,
) -> Block | None:
    """The preflight's signature check on one node's report (None: it passes).
    `certificates`: the certSecrets as read, by name. A node whose enforcement is unknown is
    checked as one that enforces: unknown is never taken as safe."""
    trust = report.kernel_trust
    if trusted or trust.signatures == pb.KernelTrust.SIGNATURES_NOT_ENFORCED:
        return None
    enforced = trust.signatures == pb.KernelTrust.SIGNATURES_ENFORCED
    kind = BlockKind.SIGNATURES_UNKNOWN
    if enforced:
        node = f"the node enforces module signatures ({enforcement_words(trust)})"
    else:
        node = (
            "whether the node enforces module signatures is unknown "
            f"({unknown_words(report)}), so it is taken as enforcing"
        )
    kernel = report.kernel_release
    if signed_for(kernel_module, kernel):
        name = cert_secret_for(kernel_module, kernel)
        certificate = certificates.get(name) or SigningCertificate(
            name, problem=f"certSecret {name} was not read"
        )
        why = untrusted_words(report, certificate)
        if not why:
            return None
        return Block(
            BlockKind.SIGNING_KEY if enforced else kind,
            f"{node}: {why}; the target {version} would be refused after the unload, leaving "
            "the node without a driver (or set rollout.trustImageSignatures if the node trusts "
            f"it){'' if enforced else '; ' + _FIND_OUT}",
        )
    return Block(
        BlockKind.UNSIGNED_TARGET if enforced else kind,
        f"{node} and the target {version} is not signed for kernel {kernel or '(unknown)'}: "
        "its load would be refused after the unload, leaving the node without a driver; sign "
        "it in the cluster (kernelModule.sign, docs/secure-boot.md), or set "
        "rollout.trustImageSignatures if its modules are signed already"
        f"{'' if enforced else '; ' + _FIND_OUT}",
    )
