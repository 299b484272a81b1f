"""Which keys the node's kernel verifies modules with, besides its own: UEFI db, shim's MOK list.

What the kernel does with them (security/integrity/platform_certs/load_uefi.c,
keyring_handler.c, machine_keyring.c; kernel/module/signing.c):

- db's X.509 keys go to the `.platform` keyring (get_handler_for_db), unless shim's
  `MokIgnoreDB` variable exists (uefi_check_ignore_db);
- MokListRT's keys are loaded only with Secure Boot on (load_uefi_certs), into `.machine` when
  the kernel has CONFIG_INTEGRITY_MACHINE_KEYRING and shim's `MokListTrustedRT` is an entry of
  its MOK config table (get_handler_for_mok, imputed_trust_enabled, uefi_check_trust_mok_keys:
  efi_mokvar_entry_find, which looks at the table only, and at the entry's presence only, not
  its value), else into `.platform`;
- mainline verifies modules with .builtin_trusted_keys and .secondary_trusted_keys (which links
  .machine), never with .platform (mod_verify_sig: VERIFY_USE_SECONDARY_KEYRING). Ubuntu's
  kernels carry "UBUNTU: SAUCE: (lockdown) KEYS: Make use of platform keyring for module
  signature verify", which retries with .platform: there db's and every MOK key verify modules.

So the agent reports the facts: MokListTrustedRT in the MOK config table (the kernel exposes
the table's entries as files in /sys/firmware/efi/mok-variables/, drivers/firmware/efi/
mokvar-table.c; shim, mok.c, puts it there with the byte 0x01 unless the MokListTrusted variable
exists), db's keys (efivarfs, agent/efi_signature_list.py), and whether the kernel is Ubuntu's
(/proc/version_signature, which only Ubuntu's kernels have). Anything unreadable is None.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.efi_signature_list import EfiListError, x509_keys
from agent.hostfs import HostFiles
from agent.warninglog import WarningLog
from gpuctl.common.module_signature import SignatureFacts

EFI_DIR = "sys/firmware/efi"
EFIVARS_DIR = "sys/firmware/efi/efivars"
MOK_CONFIG_TABLE_DIR = "sys/firmware/efi/mok-variables"
MOK_LIST_TRUSTED = "MokListTrustedRT"
SHIM_GUID = "605dab50-e046-4300-abb6-3dd810dd8b23"
IMAGE_SECURITY_DATABASE_GUID = "d719b2cb-3d3a-4596-a3bc-dad00e67656f"
DB_VARIABLE = f"db-{IMAGE_SECURITY_DATABASE_GUID}"
MOK_IGNORE_DB_VARIABLE = f"MokIgnoreDB-{SHIM_GUID}"
UBUNTU_VERSION_SIGNATURE = "proc/version_signature"
_EFI_ATTRIBUTE_BYTES = 4  # efivarfs: a little-endian u32 of attributes, then the data


@dataclass(frozen=True, slots=True)
class ModuleKeyrings:
    # MokListTrustedRT is in shim's MOK config table; None when not EFI.
    mok_list_trusted: bool | None
    # db's X.509 keys (empty when MokIgnoreDB); None when absent or unreadable.
    db_keys: tuple[SignatureFacts, ...] | None
    # The kernel verifies modules with .platform too (an Ubuntu kernel); None: not known.
    platform_keys_verify_modules: bool | None


NOTHING_READ = ModuleKeyrings(None, None, None)


def read_module_keyrings(files: HostFiles, log: WarningLog) -> ModuleKeyrings:
    return ModuleKeyrings(
        mok_list_trusted=_mok_list_trusted(files),
        db_keys=_db_keys(files, log),
        platform_keys_verify_modules=True if files.exists(UBUNTU_VERSION_SIGNATURE) else None,
    )


def _mok_list_trusted(files: HostFiles) -> bool | None:
    """Whether the kernel found MokListTrustedRT in the MOK config table. No table (no
    mok-variables directory) means the kernel found none: it trusts no MOK key for .machine."""
    if not files.exists(EFI_DIR):
        return None
    return files.exists(f"{MOK_CONFIG_TABLE_DIR}/{MOK_LIST_TRUSTED}")


def _db_keys(files: HostFiles, log: WarningLog) -> tuple[SignatureFacts, ...] | None:
    if not files.exists(EFI_DIR):
        return None
    relative = f"{EFIVARS_DIR}/{DB_VARIABLE}"
    try:
        if files.exists(f"{EFIVARS_DIR}/{MOK_IGNORE_DB_VARIABLE}"):
            return ()  # the kernel ignores db
        raw = files.read_bytes(relative)
    except FileNotFoundError:
        return None
    except OSError as error:
        log.add_error(relative, error)
        return None
    try:
        return tuple(x509_keys(raw[_EFI_ATTRIBUTE_BYTES:]))
    except EfiListError as error:
        log.add(relative, f"not an EFI signature list: {error}")
        return None
