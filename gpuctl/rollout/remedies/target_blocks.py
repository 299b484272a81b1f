"""Remedies of the Blocked kinds that say the target would not load on the node (pure): its
image not found or not holding the node's kernel's modules (gpuctl/rollout/step/kernel_proof.py),
its signature refused (gpuctl/rollout/step/preflight.py), or every load of the module refused
by the node's boot configuration. Each blocks before anything is unloaded.
"""

from __future__ import annotations

from gpuctl.rollout.input.image_probe import PROBE_LABEL
from gpuctl.rollout.reasons import BlockKind
from gpuctl.rollout.remedies.remedy import NAMESPACE, STATUS, Remedy

PROBES = f"kubectl -n {NAMESPACE} get pods -l {PROBE_LABEL} -o wide  # the node's image probe"
PREFLIGHT = "gpuctl preflight --kernel KERNEL NAME  # mapping, image and signing for that kernel"
KERNEL = "kubectl get node NODE -o jsonpath='{.status.nodeInfo.kernelVersion}'"
TRUST = "`rollout.trustImageSignatures: true`"
NEW_VERSION = (
    "A change of the signing settings is a new version: the rollout takes the node through "
    "its checks again."
)

TARGET_BLOCKS = {
    BlockKind.IMAGE_NOT_READY: Remedy(
        summary="KMM has not found the target's image for the node's kernel: push it or fix the "
        "mapping",
        means=(
            "A reload waits until KMM finds the target's image for the node's kernel (its "
            "ModuleImagesConfig says `Exists`) and a probe Pod proves the image holds that "
            "kernel's modules; neither came within `rollout.timeouts.check`, so nothing was "
            "unloaded and the node runs the old version."
        ),
        confirm=(
            f"{STATUS}  # the image named, and what KMM or the probe says",
            f"kubectl -n {NAMESPACE} get moduleimagesconfigs -o yaml  # each image's status",
            PROBES,
            KERNEL,
            PREFLIGHT,
        ),
        fix=(
            "Push the image for the node's kernel, or fix the kernel mapping that names it "
            "(and its pull secret). Where KMM signs or builds the image and that failed, fix "
            "the cause and raise `kernelModule.imageRebuildTriggerGeneration` "
            "(docs/secure-boot.md). The node goes on by itself once KMM finds the image."
        ),
    ),
    BlockKind.IMAGE_LACKS_KERNEL: Remedy(
        summary="the target's image has no modules for the node's kernel: build and push them",
        means=(
            "The probe Pod ran KMM's own copy of `/opt/lib/modules/<kernel>` out of the "
            "target's image on the node and it failed: KMM's loader would fail for ever after "
            "the old module was unloaded."
        ),
        confirm=(
            f"{STATUS}  # the image, the kernel and cp's words",
            PROBES,
            f"kubectl -n {NAMESPACE} logs POD  # the probe's copy error",
            KERNEL,
        ),
        fix=(
            "Build the image with the modules of that kernel under `/opt/lib/modules/<kernel>` "
            "and push it (the same tag will do), or map that kernel to an image built for it. "
            "The Blocked node runs the probe again at each recheck and goes on by itself."
        ),
    ),
    BlockKind.UNSIGNED_TARGET: Remedy(
        summary="the node enforces module signatures and the target is unsigned: sign it",
        means=(
            "The node enforces module signatures (Secure Boot with lockdown, or "
            "`module.sig_enforce`) and the target is not signed for its kernel, so its load "
            "would be refused after the unload."
        ),
        confirm=(
            "gpuctl node inspect NODE  # Kernel: Secure Boot, lockdown, sig_enforce",
            "kubectl get gpudriver NAME -o jsonpath='{.spec.kernelModule.sign}'",
            PREFLIGHT,
        ),
        fix=(
            "Have KMM sign the driver with a key the node trusts (`kernelModule.sign`, "
            f"docs/secure-boot.md), or, when the image's modules are signed already, set {TRUST}. "
            f"{NEW_VERSION}"
        ),
    ),
    BlockKind.SIGNING_KEY: Remedy(
        summary="the node does not trust the target's signing key: enroll it (mokutil --import)",
        means=(
            "The node enforces module signatures and the target is signed with a key the node "
            "does not trust, or whose trust cannot be told, so its load would be refused "
            "after the unload."
        ),
        confirm=(
            f"{STATUS}  # the key's name and serial, and its certSecret",
            "gpuctl node inspect NODE  # enrolled MOK keys, the loaded module's signer",
            "mokutil --list-enrolled  # on the node",
        ),
        fix=(
            "Enroll the certificate on the node (`mokutil --import`, reboot, confirm in "
            "MokManager; on a kernel other than Ubuntu's `mokutil --trust-mok` too: "
            "docs/secure-boot.md), and let the coordinator read the certSecret (the chart's "
            "`coordinator.signingCertificateSecrets`). Or set "
            f"{TRUST} if the node trusts the key another way."
        ),
    ),
    BlockKind.SIGNATURES_UNKNOWN: Remedy(
        summary="unknown whether the node enforces signatures: let the agent read it, or sign",
        means=(
            "The agent cannot tell whether the node enforces module signatures (an older "
            "agent, or efivarfs or securityfs not mounted in its view of `/sys`) and the "
            "target is unsigned or its key not shown trusted: unknown is taken as enforcing."
        ),
        confirm=(
            "gpuctl node inspect NODE  # Kernel: unknown, and the warnings name the file",
            "gpuctl version  # an older agent",
        ),
        fix=(
            "Upgrade the agent, or give it the host's `/sys` with efivarfs and securityfs "
            "mounted, as the chart does; or sign the target with a key the node trusts "
            f"(`kernelModule.sign`, docs/secure-boot.md), or set {TRUST} when you vouch for "
            "the images."
        ),
    ),
    BlockKind.DRIVER_DISABLED: Remedy(
        summary="the node's boot configuration refuses every load of xe: take that off, reboot",
        means=(
            "The node's kernel refuses every load of `xe` (`nomodeset` or "
            "`module_blacklist=xe` on its command line, an `install xe` line in modprobe.d), "
            "so the target would never load after the unload."
        ),
        confirm=(
            "gpuctl node inspect NODE  # At boot: no xe can load, and the lines that say so",
            "cat /proc/cmdline  # on the node",
            "modprobe -c | grep -E '^(install|blacklist) xe'  # on the node",
        ),
        fix=(
            "Take that off the node's boot configuration and reboot (to keep the in-tree `xe` "
            "from autoloading, `blacklist xe` is the way: docs/reboots.md#blacklisting-it); "
            "the node then goes on by itself."
        ),
    ),
}
