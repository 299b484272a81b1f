"""What the node's kernel will accept as a module: Secure Boot, lockdown, signature enforcement.

A new out-of-tree `xe` that the kernel refuses leaves the node with no GPU driver, so the
rollout must know before the unload whether this node checks module signatures:

- Secure Boot: the EFI variable `SecureBoot-8be4df61-...` under efivarfs (4 attribute bytes,
  then 1 = on); no `/sys/firmware/efi` at all is a BIOS boot (no Secure Boot); shim's
  `MokSBStateRT-605dab50-...` = 1 means validation was turned off with mokutil, and its
  `MokListRT-605dab50-...` lists the enrolled Machine Owner Keys (agent/efi_signature_list.py);
- lockdown (`/sys/kernel/security/lockdown`, the bracketed word): `integrity` and
  `confidentiality` refuse unsigned modules, and distribution kernels turn it on with Secure
  Boot; no such file on a mounted securityfs means the kernel has no lockdown;
- `module.sig_enforce` (`/sys/module/module/parameters/sig_enforce`, Y or N): Y refuses
  every module not signed by a trusted key; no parameter means the kernel does not check
  signatures at all.

The verdict, `signatures`, is ENFORCED when sig_enforce is Y, or lockdown is on in a kernel
that checks signatures; NOT_ENFORCED when the kernel does not check them, or sig_enforce is N
and lockdown off; else unknown. Unknown (efivarfs or securityfs not mounted, a file
unreadable) stays unknown, with a warning: never "off".
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from agent.efi_signature_list import EfiListError, x509_keys
from agent.hostfs import HostFiles
from agent.module_keyrings import NOTHING_READ, ModuleKeyrings, read_module_keyrings
from agent.warninglog import WarningLog
from gpuctl.common.module_signature import SignatureFacts

EFI_DIR = "sys/firmware/efi"
EFIVARS_DIR = "sys/firmware/efi/efivars"
SECURE_BOOT_VARIABLE = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
SHIM_GUID = "605dab50-e046-4300-abb6-3dd810dd8b23"
SHIM_STATE_VARIABLE = f"MokSBStateRT-{SHIM_GUID}"
# shim's runtime copy of the enrolled Machine Owner Keys; a long list continues in
# MokListRT1, MokListRT2, ...
MOK_LIST_VARIABLE = "MokListRT"
_MOK_LIST_PARTS = 16
SECURITYFS_DIR = "sys/kernel/security"
LOCKDOWN_PATH = "sys/kernel/security/lockdown"
SIG_ENFORCE_PATH = "sys/module/module/parameters/sig_enforce"
_EFI_ATTRIBUTE_BYTES = 4


class SecureBoot(enum.Enum):
    UNKNOWN = "SECURE_BOOT_UNSPECIFIED"
    NOT_EFI = "SECURE_BOOT_NOT_EFI"
    DISABLED = "SECURE_BOOT_DISABLED"
    ENABLED = "SECURE_BOOT_ENABLED"


class Lockdown(enum.Enum):
    UNKNOWN = "LOCKDOWN_UNSPECIFIED"
    NOT_AVAILABLE = "LOCKDOWN_NOT_AVAILABLE"
    NONE = "LOCKDOWN_NONE"
    INTEGRITY = "LOCKDOWN_INTEGRITY"
    CONFIDENTIALITY = "LOCKDOWN_CONFIDENTIALITY"


class SigEnforce(enum.Enum):
    UNKNOWN = "SIG_ENFORCE_UNSPECIFIED"
    NOT_BUILT = "SIG_ENFORCE_NOT_BUILT"
    OFF = "SIG_ENFORCE_OFF"
    ON = "SIG_ENFORCE_ON"


class Signatures(enum.Enum):
    UNKNOWN = "SIGNATURES_UNSPECIFIED"
    NOT_ENFORCED = "SIGNATURES_NOT_ENFORCED"
    ENFORCED = "SIGNATURES_ENFORCED"


@dataclass(frozen=True, slots=True)
class KernelTrust:
    secure_boot: SecureBoot
    shim_validation_disabled: bool | None
    lockdown: Lockdown
    sig_enforce: SigEnforce
    # The enrolled Machine Owner Keys; None when there is no MokListRT or it is unreadable.
    enrolled_keys: tuple[SignatureFacts, ...] | None = None
    # db, MokListTrustedRT, and whether .platform verifies modules (module_keyrings.py).
    keyrings: ModuleKeyrings = NOTHING_READ

    @property
    def signatures(self) -> Signatures:
        return judge_signatures(self.lockdown, self.sig_enforce)

    @property
    def checks_signatures(self) -> bool | None:
        """Whether the kernel checks module signatures at all (so that no `E` taint means
        a verified signature); None when unknown."""
        if self.sig_enforce is SigEnforce.UNKNOWN:
            return None
        return self.sig_enforce is not SigEnforce.NOT_BUILT


def judge_signatures(lockdown: Lockdown, sig_enforce: SigEnforce) -> Signatures:
    locked = lockdown in (Lockdown.INTEGRITY, Lockdown.CONFIDENTIALITY)
    if sig_enforce is SigEnforce.ON or (locked and sig_enforce is SigEnforce.OFF):
        return Signatures.ENFORCED
    if sig_enforce is SigEnforce.NOT_BUILT:
        return Signatures.NOT_ENFORCED
    if sig_enforce is SigEnforce.OFF and lockdown in (Lockdown.NONE, Lockdown.NOT_AVAILABLE):
        return Signatures.NOT_ENFORCED
    return Signatures.UNKNOWN


def read_kernel_trust(files: HostFiles, log: WarningLog) -> KernelTrust:
    return KernelTrust(
        secure_boot=_secure_boot(files, log),
        shim_validation_disabled=_shim_validation_disabled(files, log),
        lockdown=_lockdown(files, log),
        sig_enforce=_sig_enforce(files, log),
        enrolled_keys=_enrolled_keys(files, log),
        keyrings=read_module_keyrings(files, log),
    )


def _efi_variable(files: HostFiles, name: str, log: WarningLog) -> bytes | None:
    """The variable's data (after its attribute bytes); None when absent. OSError (other than
    absence) and a value too short to hold a byte are warnings and raise ValueError."""
    relative = f"{EFIVARS_DIR}/{name}"
    try:
        raw = files.read_bytes(relative)
    except FileNotFoundError:
        return None
    except OSError as error:
        log.add_error(relative, error)
        raise ValueError(relative) from error
    if len(raw) <= _EFI_ATTRIBUTE_BYTES:
        log.add(relative, f"{len(raw)} bytes: not an EFI variable with a value")
        raise ValueError(relative)
    return raw[_EFI_ATTRIBUTE_BYTES:]


def _listable_and_not_empty(files: HostFiles, relative: str) -> bool:
    try:
        return bool(files.list_dir(relative))
    except OSError:
        return False


def _secure_boot(files: HostFiles, log: WarningLog) -> SecureBoot:
    if not files.exists(EFI_DIR):
        return SecureBoot.NOT_EFI
    try:
        data = _efi_variable(files, SECURE_BOOT_VARIABLE, log)
    except ValueError:
        return SecureBoot.UNKNOWN
    if data is None:
        if _listable_and_not_empty(files, EFIVARS_DIR):
            return SecureBoot.DISABLED  # EFI firmware without Secure Boot
        log.add(EFIVARS_DIR, "efivarfs not mounted: Secure Boot state unknown")
        return SecureBoot.UNKNOWN
    return SecureBoot.ENABLED if data[0] == 1 else SecureBoot.DISABLED


def _shim_validation_disabled(files: HostFiles, log: WarningLog) -> bool | None:
    if not files.exists(EFI_DIR):
        return None
    try:
        data = _efi_variable(files, SHIM_STATE_VARIABLE, log)
    except ValueError:
        return None
    return None if data is None else data[0] == 1


def _enrolled_keys(files: HostFiles, log: WarningLog) -> tuple[SignatureFacts, ...] | None:
    """The certificates in MokListRT (and its continuations), as modinfo names keys."""
    if not files.exists(EFI_DIR):
        return None
    data = b""
    for part in range(_MOK_LIST_PARTS):
        name = f"{MOK_LIST_VARIABLE}{part or ''}-{SHIM_GUID}"
        try:
            value = _efi_variable(files, name, log)
        except ValueError:
            return None
        if value is None:
            if part == 0:
                return None
            break
        data += value
    try:
        return tuple(x509_keys(data))
    except EfiListError as error:
        log.add(f"{EFIVARS_DIR}/{MOK_LIST_VARIABLE}-{SHIM_GUID}", f"not a MOK list: {error}")
        return None


def _lockdown(files: HostFiles, log: WarningLog) -> Lockdown:
    try:
        text = files.read_text(LOCKDOWN_PATH)
    except FileNotFoundError:
        if _listable_and_not_empty(files, SECURITYFS_DIR):
            return Lockdown.NOT_AVAILABLE
        log.add(SECURITYFS_DIR, "securityfs not mounted: kernel lockdown unknown")
        return Lockdown.UNKNOWN
    except (OSError, UnicodeDecodeError) as error:
        log.add_error(LOCKDOWN_PATH, error)
        return Lockdown.UNKNOWN
    start, end = text.find("["), text.find("]")
    word = text[start + 1 : end] if 0 <= start < end else ""
    mode = {
        "none": Lockdown.NONE,
        "integrity": Lockdown.INTEGRITY,
        "confidentiality": Lockdown.CONFIDENTIALITY,
    }.get(word)
    if mode is None:
        log.add(LOCKDOWN_PATH, f"no selected lockdown mode in {text.strip()[:60]!r}")
        return Lockdown.UNKNOWN
    return mode


def _sig_enforce(files: HostFiles, log: WarningLog) -> SigEnforce:
    try:
        value = files.read_text(SIG_ENFORCE_PATH).strip()
    except FileNotFoundError:
        if _listable_and_not_empty(files, "sys/module"):
            return SigEnforce.NOT_BUILT
        log.add("sys/module", "not readable: module signature enforcement unknown")
        return SigEnforce.UNKNOWN
    except (OSError, UnicodeDecodeError) as error:
        log.add_error(SIG_ENFORCE_PATH, error)
        return SigEnforce.UNKNOWN
    if value in ("Y", "N"):
        return SigEnforce.ON if value == "Y" else SigEnforce.OFF
    log.add(SIG_ENFORCE_PATH, f"not Y or N: {value[:20]!r}")
    return SigEnforce.UNKNOWN


class Verified(enum.Enum):
    UNKNOWN = "VERIFIED_UNSPECIFIED"
    VERIFIED = "VERIFIED"
    UNVERIFIED = "UNVERIFIED"


def loaded_signature(taint: str | None, trust: KernelTrust) -> Verified:
    """Whether the kernel verified the loaded module's signature: its taint has `E` when it
    loaded unsigned or untrusted; without `E`, verified only in a kernel that checks."""
    if taint is None:
        return Verified.UNKNOWN
    if "E" in taint:
        return Verified.UNVERIFIED
    return Verified.VERIFIED if trust.checks_signatures else Verified.UNKNOWN
