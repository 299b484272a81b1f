"""The preflight before the unload (gpuctl/rollout/step/preflight.py,
gpuctl/rollout/input/signing_key.py): a node whose kernel enforces module signatures is Blocked
while the target is unsigned, or signed with a key the node does not trust (or one whose trust
cannot be told), naming why, and goes on once the
GPUDriver signs it with a key the node trusts or says its images are signed already."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping
from typing import Any

from cryptography.hazmat.primitives import serialization

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.input.facts import GpuPod, ReportFacts
from gpuctl.rollout.input.settings import RolloutSettings
from gpuctl.rollout.input.signing_key import (
    SigningCertificate,
    cert_secret_for,
    cert_secrets,
    certificate_of,
)
from gpuctl.rollout.step.checking import step_checking
from gpuctl.rollout.step.preflight import signature_block, signed_for
from testbed.fakehost.signing import SigningKey, signing_key
from tests.support.rollout_samples import (
    KMM,
    TARGET,
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


def secret_of(key: SigningKey, *, pem: bool = True) -> dict[str, Any]:
    """A certSecret as the API serves it: the certificate under `cert`, base64."""
    encoding = serialization.Encoding.PEM if pem else serialization.Encoding.DER
    data = key.certificate.public_bytes(encoding)
    return {"data": {"cert": base64.b64encode(data).decode()}}


def certificates(key: SigningKey | None = None) -> dict[str, SigningCertificate]:
    key = key or signing_key()
    return {"c": certificate_of("gpu-system/c", secret_of(key))}


def enrol(facts: ReportFacts, *keys: SigningKey) -> ReportFacts:
    """The node's MOK list: `keys` enrolled (none: a readable, empty list)."""
    mok = facts.report.kernel_trust.mok_list
    mok.SetInParent()
    for key in keys:
        mok.keys.add(signer=key.common_name, key_id=key.key_id)
    return facts


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
    read: Mapping[str, SigningCertificate] | None = None,
    **settings: Any,
) -> PatchNode:
    facts = node(phase=Phase.CHECKING, labels=loaded_labels(), pods=pods)
    inp = rollout([facts], settings=RolloutSettings(hold_after_first_node=False, **settings))
    read = certificates() if read is None else read
    inp = dataclasses.replace(inp, kernel_module=kernel_module, signing_certificates=read)
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


def test_a_target_signed_with_an_enrolled_key_or_trusted_images_or_a_lax_node_go_on() -> None:
    signed = {"kernelMappings": MAPPINGS, "sign": SIGN}
    assert check(ubuntu(enrol(enforcing(), signing_key())), signed).phase_to is not Phase.BLOCKED
    trusted = check(enforcing(), {"kernelMappings": MAPPINGS}, trust_image_signatures=True)
    assert trusted.phase_to is not Phase.BLOCKED
    relaxed = enforcing(pb.KernelTrust.SIGNATURES_NOT_ENFORCED)
    assert check(relaxed, {"kernelMappings": MAPPINGS}).phase_to is not Phase.BLOCKED


def test_unknown_enforcement_is_taken_as_enforcing_and_blocks_naming_what_is_unknown() -> None:
    """An agent that cannot read lockdown (securityfs not mounted) or sig_enforce: the node
    may refuse an unsigned target after the unload, so it is Blocked, never taken as lax."""
    facts = enforcing(pb.KernelTrust.SIGNATURES_UNSPECIFIED)
    facts.report.kernel_trust.lockdown = pb.KernelTrust.LOCKDOWN_UNSPECIFIED
    write = check(facts, {"kernelMappings": MAPPINGS})
    assert write.phase_to is Phase.BLOCKED
    assert write.annotations[names.REASON_KIND] == "signatures-unknown"
    words = str(write.annotations[names.REASON])
    assert words.startswith(
        "whether the node enforces module signatures is unknown (its agent cannot read "
        "lockdown), so it is taken as enforcing and the target "
    )
    assert "sign it in the cluster (kernelModule.sign" in words
    assert "efivarfs and securityfs mounted" in words
    assert KMM.version not in write.labels  # nothing unloads
    # A signed target whose key the node cannot be shown to trust: blocked the same way.
    signed = check(facts, {"kernelMappings": MAPPINGS, "sign": SIGN})
    assert signed.annotations[names.REASON_KIND] == "signatures-unknown"
    # A report without any kernel facts (an older agent) says so.
    older = new_report()
    older.report.ClearField("kernel_trust")
    old_write = check(older, {"kernelMappings": MAPPINGS})
    assert old_write.annotations[names.REASON_KIND] == "signatures-unknown"
    assert "(an older agent)" in str(old_write.annotations[names.REASON])
    # The admin vouching for the images lets it go on, as on an enforcing node.
    vouched = check(facts, {"kernelMappings": MAPPINGS}, trust_image_signatures=True)
    assert vouched.phase_to is not Phase.BLOCKED


def test_the_words_say_why_the_node_enforces() -> None:
    report = enforcing().report
    report.kernel_trust.lockdown = pb.KernelTrust.LOCKDOWN_NONE
    report.kernel_trust.secure_boot = pb.KernelTrust.SECURE_BOOT_DISABLED
    report.kernel_trust.sig_enforce = pb.KernelTrust.SIG_ENFORCE_ON
    block = signature_block(report, {"kernelMappings": MAPPINGS}, {}, trusted=False, version="v1")
    assert block is not None
    assert "(module.sig_enforce=Y)" in block.words


def test_a_key_the_node_has_not_enrolled_blocks_naming_the_key_and_the_fix() -> None:
    other = signing_key("someone else's key", 0x77)
    write = check(enrol(enforcing(), other), {"kernelMappings": MAPPINGS, "sign": SIGN})
    assert write.phase_to is Phase.BLOCKED
    assert write.annotations[names.REASON_KIND] == "signing-key"
    key = signing_key()
    assert str(write.annotations[names.REASON]) == (
        "the node enforces module signatures (Secure Boot, lockdown integrity): KMM signs the "
        f"target with '{key.common_name}' (serial {key.key_id}, Secret gpu-system/c), which the "
        "node does not trust: not among its 1 enrolled MOK key, nor the key its loaded module "
        "was verified with; enroll it (mokutil --import, docs/secure-boot.md); the target "
        f"{TARGET} would be refused after the unload, leaving the node without a "
        "driver (or set rollout.trustImageSignatures if the node trusts it)"
    )
    # Trusting the images (the admin vouches for the key) lets it go on.
    vouched = check(
        enrol(enforcing(), other),
        {"kernelMappings": MAPPINGS, "sign": SIGN},
        trust_image_signatures=True,
    )
    assert vouched.phase_to is not Phase.BLOCKED


def test_trust_that_cannot_be_told_blocks_and_a_verified_load_with_the_key_tells_it() -> None:
    signed = {"kernelMappings": MAPPINGS, "sign": SIGN}
    # No readable MOK list, and the loaded module was not verified with the key.
    unknown = check(enforcing(), signed)
    assert unknown.phase_to is Phase.BLOCKED
    assert "cannot tell whether the node trusts 'gpuctl test signing key'" in str(
        unknown.annotations[names.REASON]
    )
    # The kernel verified the loaded module with that key (a key of its built-in keyring).
    facts = enforcing()
    key = signing_key()
    signature = facts.report.module.signature
    signature.verified = pb.ModuleSignature.VERIFIED
    signature.signer, signature.key_id = key.common_name, key.key_id.lower()
    assert check(facts, signed).phase_to is not Phase.BLOCKED
    # ...but not when the kernel did not verify it (an E taint).
    signature.verified = pb.ModuleSignature.UNVERIFIED
    assert check(facts, signed).phase_to is Phase.BLOCKED
    # A certificate that could not be read is not trusted either.
    unread = check(enrol(enforcing(), key), signed, read={})
    assert unread.phase_to is Phase.BLOCKED
    assert "certSecret c was not read" in str(unread.annotations[names.REASON])


def test_the_certificate_is_read_from_pem_or_der_and_every_problem_is_named() -> None:
    key = signing_key()
    for pem in (True, False):
        read = certificate_of("ns/c", secret_of(key, pem=pem))
        assert read.identity is not None
        assert (read.identity.signer, read.identity.key_id) == (key.common_name, key.key_id)
    assert certificate_of("ns/c", None).problem == "Secret ns/c not found"
    assert certificate_of("ns/c", None, "forbidden").problem == "forbidden"
    assert certificate_of("ns/c", {"data": {}}).problem == "Secret ns/c has no data key `cert`"
    garbage = certificate_of("ns/c", {"data": {"cert": base64.b64encode(b"hello").decode()}})
    assert garbage.identity is None
    assert garbage.problem.startswith("`cert` of Secret ns/c is not a PEM certificate: ")
    not_base64 = certificate_of("ns/c", {"data": {"cert": "%%%"}})
    assert not_base64.problem.startswith("`cert` of Secret ns/c is not a PEM certificate: ")


def test_kmm_takes_the_mappings_cert_secret_over_the_modules() -> None:
    own = {**SIGN, "certSecret": {"name": "mapping-cert"}}
    spec = {
        "sign": SIGN,
        "kernelMappings": [{"regexp": "^6\\.17\\.", "containerImage": "x", "sign": own}],
    }
    assert cert_secret_for(spec, "6.17.0-7-generic") == "mapping-cert"
    assert cert_secret_for(spec, KERNEL) == "c"
    assert cert_secret_for({"kernelMappings": MAPPINGS}, KERNEL) == ""
    assert cert_secrets(spec) == ["c", "mapping-cert"]


def ubuntu(facts: ReportFacts) -> ReportFacts:
    """An Ubuntu kernel: it verifies modules with .platform too (agent/module_keyrings.py)."""
    facts.report.kernel_trust.platform_keys_verify_modules = True
    return facts


def test_a_mok_key_counts_only_where_the_kernels_keyrings_verify_modules_with_it() -> None:
    """MokListRT's keys go to .machine only with MokListTrustedRT (and the kernel's
    CONFIG_INTEGRITY_MACHINE_KEYRING), else to .platform, which mainline never verifies
    modules with; Ubuntu's kernels do. Each case names its own remedy."""
    signed = {"kernelMappings": MAPPINGS, "sign": SIGN}
    key = signing_key()
    # Enrolled, no MokListTrustedRT, a kernel not known to use .platform: refused.
    plain = enrol(enforcing(), key)
    plain.report.kernel_trust.mok_list_trusted = False
    write = check(plain, signed)
    assert write.annotations[names.REASON_KIND] == "signing-key"
    assert "which the node does not trust: it is an enrolled MOK, but shim does not trust" in (
        str(write.annotations[names.REASON])
    )
    assert "mokutil --trust-mok, reboot, confirm in MokManager" in str(
        write.annotations[names.REASON]
    )
    # MokListTrustedRT set, but the kernel's .machine keyring is not known: cannot tell.
    plain.report.kernel_trust.mok_list_trusted = True
    unsure = check(plain, signed)
    assert unsure.phase_to is Phase.BLOCKED
    assert "cannot tell whether the node trusts" in str(unsure.annotations[names.REASON])
    # Ubuntu's kernel verifies with .platform: trusted either way.
    trusted = ubuntu(enrol(enforcing(), key))
    trusted.report.kernel_trust.mok_list_trusted = False
    assert check(trusted, signed).phase_to is not Phase.BLOCKED
    # Without Secure Boot the kernel loads no MOK key at all (sig_enforce=Y enforces).
    no_sb = ubuntu(enrol(enforcing(), key))
    no_sb.report.kernel_trust.secure_boot = pb.KernelTrust.SECURE_BOOT_DISABLED
    no_sb.report.kernel_trust.sig_enforce = pb.KernelTrust.SIG_ENFORCE_ON
    assert "booted without Secure Boot" in str(check(no_sb, signed).annotations[names.REASON])


def test_a_db_key_is_trusted_only_where_the_kernel_verifies_modules_with_platform() -> None:
    signed = {"kernelMappings": MAPPINGS, "sign": SIGN}
    key = signing_key()
    facts = enrol(enforcing())  # an empty MOK list
    facts.report.kernel_trust.db_keys.keys.add(signer=key.common_name, key_id=key.key_id)
    refused = check(facts, signed)
    assert refused.phase_to is Phase.BLOCKED
    assert "it is in the node's UEFI db" in str(refused.annotations[names.REASON])
    assert check(ubuntu(facts), signed).phase_to is not Phase.BLOCKED


def test_a_node_whose_kernel_refuses_every_load_is_blocked_before_the_unload() -> None:
    """nomodeset (or module_blacklist=xe, an `install xe /bin/false`): the agent says
    DISABLED, and KMM's build would be refused after the unload like any other."""
    facts = new_report()
    facts.report.kernel_release = KERNEL
    facts.report.kernel_trust.signatures = pb.KernelTrust.SIGNATURES_NOT_ENFORCED
    facts.report.in_tree_autoload.state = pb.InTreeAutoload.DISABLED
    facts.report.in_tree_autoload.sources.append("/proc/cmdline: nomodeset")
    write = check(facts, {"kernelMappings": MAPPINGS})
    assert write.phase_to is Phase.BLOCKED
    assert write.annotations[names.REASON_KIND] == "driver-disabled"
    reason = str(write.annotations[names.REASON])
    assert reason.startswith("the node refuses every load of xe (/proc/cmdline: nomodeset)")
    facts.report.in_tree_autoload.state = pb.InTreeAutoload.BLACKLISTED
    assert check(facts, {"kernelMappings": MAPPINGS}).phase_to is not Phase.BLOCKED
