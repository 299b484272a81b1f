"""Does the node's kernel verify modules with a given key? From the agent's report (pure).

As the kernel does it (agent/module_keyrings.py names the kernel source): a key is trusted
when the kernel verified the loaded module with it (no `E` taint: a key of its built-in or
secondary keyring shows only that way), or when it is one of the node's

- MOK keys (MokListRT), loaded only with Secure Boot on, and then verifying modules where the
  kernel also verifies with .platform (Ubuntu's kernels). Where that is not known, a MOK key
  is in .machine only when MokListTrustedRT is in shim's MOK config table *and* the kernel was
  built with CONFIG_INTEGRITY_MACHINE_KEYRING (without its CA-only restriction), which the agent
  does not read: cannot tell, never trusted. Without MokListTrustedRT it is in .platform,
  which mainline never verifies modules with: not shown to be trusted.
- db keys (UEFI `db`, unless MokIgnoreDB), in .platform: trusted only where the kernel
  verifies modules with .platform.

Each verdict comes with the admin's remedy; unknown is its own verdict and never trusted.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.common.module_signature import SignatureFacts


class KeyTrust(enum.Enum):
    TRUSTED = "trusted"
    NOT_ENROLLED = "not-enrolled"  # in no key list the kernel verifies modules with
    MOK_NOT_TRUSTED = "mok-not-trusted"  # enrolled, but not in a keyring verifying modules
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class KeyVerdict:
    trust: KeyTrust
    words: str  # why, with what to do ("" when trusted)


def _has(keys: Iterable[pb.EnrolledKey], key: SignatureFacts) -> bool:
    wanted = (key.signer, key.key_id.upper())
    return any((k.signer, k.key_id.upper()) == wanted for k in keys)


def judge_key(report: pb.NodeReport, key: SignatureFacts) -> KeyVerdict:
    """Whether the node's kernel verifies a module signed with `key`."""
    trust = report.kernel_trust
    signature = report.module.signature
    if signature.verified == pb.ModuleSignature.VERIFIED and _has(
        [pb.EnrolledKey(signer=signature.signer, key_id=signature.key_id)], key
    ):
        return KeyVerdict(KeyTrust.TRUSTED, "")
    platform = trust.HasField("platform_keys_verify_modules") and trust.platform_keys_verify_modules
    in_db = trust.HasField("db_keys") and _has(trust.db_keys.keys, key)
    if in_db and platform:
        return KeyVerdict(KeyTrust.TRUSTED, "")
    if not trust.HasField("mok_list"):
        return KeyVerdict(
            KeyTrust.UNKNOWN,
            "its MOK list (shim's MokListRT) cannot be read and its loaded module was not "
            "verified with that key; find out with `gpuctl node inspect` (the agent needs the "
            "host's /sys with efivarfs mounted)",
        )
    if _has(trust.mok_list.keys, key):
        return _enrolled(trust, platform)
    if in_db:
        return KeyVerdict(
            KeyTrust.UNKNOWN,
            "it is in the node's UEFI db, which the kernel puts in its .platform keyring, and "
            "this kernel is not one known to verify modules with .platform (Ubuntu's are; "
            "mainline's are not); enroll it as a MOK too (mokutil --import, docs/secure-boot.md)",
        )
    enrolled = len(trust.mok_list.keys)
    return KeyVerdict(
        KeyTrust.NOT_ENROLLED,
        f"not among its {enrolled} enrolled MOK key{'' if enrolled == 1 else 's'}, nor the key "
        "its loaded module was verified with; enroll it (mokutil --import, docs/secure-boot.md)",
    )


def _enrolled(trust: pb.KernelTrust, platform: bool) -> KeyVerdict:
    """A key in MokListRT: the kernel loads it (Secure Boot on) into .machine or .platform."""
    if trust.secure_boot == pb.KernelTrust.SECURE_BOOT_UNSPECIFIED:
        return KeyVerdict(
            KeyTrust.UNKNOWN,
            "it is an enrolled MOK, but whether the node booted with Secure Boot (without which "
            "the kernel loads no MOK key) is unknown; find out with `gpuctl node inspect`",
        )
    if trust.secure_boot != pb.KernelTrust.SECURE_BOOT_ENABLED:
        return KeyVerdict(
            KeyTrust.MOK_NOT_TRUSTED,
            "it is an enrolled MOK, but the node booted without Secure Boot, and then the "
            "kernel loads no MOK key; sign with a key of the kernel's own keyring, or boot "
            "with Secure Boot",
        )
    if platform:
        return KeyVerdict(KeyTrust.TRUSTED, "")
    if trust.HasField("mok_list_trusted") and trust.mok_list_trusted:
        return KeyVerdict(
            KeyTrust.UNKNOWN,
            "it is an enrolled MOK and MokListTrustedRT is set, but whether this kernel has "
            "the .machine keyring (CONFIG_INTEGRITY_MACHINE_KEYRING, no CA-only restriction) "
            "is not known to gpuctl, nor is it a kernel known to verify modules with .platform",
        )
    return KeyVerdict(
        KeyTrust.MOK_NOT_TRUSTED,
        "it is an enrolled MOK, but shim does not trust MOK keys for the kernel "
        "(no MokListTrustedRT), so the kernel keeps it in its .platform keyring, which this "
        "kernel is not known to verify modules with; trust them: mokutil --trust-mok, reboot, "
        "confirm in MokManager (docs/secure-boot.md)",
    )
