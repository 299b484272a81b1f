"""What the kernel will accept as a module (agent/kernel_trust.py) and the loaded module's
signature (gpuctl/common/module_signature.py), on fake host roots: each state read from where the
kernel puts it, and unknown whenever it cannot be read, never "off"."""

from __future__ import annotations

from pathlib import Path

import pytest
import zstandard

from agent.efi_signature_list import EfiListError, x509_keys
from agent.kernel_trust import (
    Lockdown,
    SigEnforce,
    Signatures,
    judge_signatures,
)
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.common.module_signature import MAGIC, SignatureFormatError, read_signature
from testbed.fakehost import FakeHost, scenarios
from testbed.fakehost.scenarios import MOK_COMMON_NAME, MOK_SERIAL
from testbed.fakehost.signing import signed, signing_key

Trust = pb.KernelTrust
Signature = pb.ModuleSignature


def trust_of(host: FakeHost) -> tuple[pb.KernelTrust, list[str]]:
    report = host.inspect()
    return report.kernel_trust, [w.path for w in report.warnings]


def test_a_bios_node_without_lockdown_or_enforcement_accepts_any_module(tmp_path: Path) -> None:
    trust, warnings = trust_of(FakeHost(tmp_path))
    assert trust.secure_boot == Trust.SECURE_BOOT_NOT_EFI
    assert trust.lockdown == Trust.LOCKDOWN_NONE
    assert trust.sig_enforce == Trust.SIG_ENFORCE_OFF
    assert trust.signatures == Trust.SIGNATURES_NOT_ENFORCED
    assert not trust.HasField("shim_validation_disabled")
    assert warnings == []


def test_secure_boot_with_lockdown_integrity_enforces_signatures(tmp_path: Path) -> None:
    trust, _ = trust_of(scenarios.secure_boot_signed_backport(tmp_path))
    assert trust.secure_boot == Trust.SECURE_BOOT_ENABLED
    assert trust.shim_validation_disabled is False
    assert trust.lockdown == Trust.LOCKDOWN_INTEGRITY
    assert trust.signatures == Trust.SIGNATURES_ENFORCED


def test_sig_enforce_alone_enforces_and_shim_validation_off_is_reported(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.boot_efi(secure_boot=True, shim_validation_disabled=True)
    host.set_sig_enforce("Y")
    trust, _ = trust_of(host)
    assert trust.shim_validation_disabled is True
    assert trust.signatures == Trust.SIGNATURES_ENFORCED


def test_efi_firmware_without_secure_boot_is_disabled(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.boot_efi(secure_boot=None)
    assert trust_of(host)[0].secure_boot == Trust.SECURE_BOOT_DISABLED
    host.boot_efi(secure_boot=False)
    assert trust_of(host)[0].secure_boot == Trust.SECURE_BOOT_DISABLED


def test_efivarfs_not_mounted_is_unknown_with_a_warning(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.write("sys/firmware/efi/runtime", "")
    host.write("sys/firmware/efi/efivars/.keep", "")
    host.remove("sys/firmware/efi/efivars/.keep")
    trust, warnings = trust_of(host)
    assert trust.secure_boot == Trust.SECURE_BOOT_UNSPECIFIED
    assert "sys/firmware/efi/efivars" in warnings


@pytest.mark.parametrize("raw", [b"", b"\x06\x00\x00\x00"])
def test_a_secure_boot_variable_without_a_value_is_unknown(tmp_path: Path, raw: bytes) -> None:
    host = FakeHost(tmp_path)
    host.boot_efi(secure_boot=True)
    host.write("sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c", raw)
    trust, warnings = trust_of(host)
    assert trust.secure_boot == Trust.SECURE_BOOT_UNSPECIFIED
    assert any("SecureBoot-" in w for w in warnings)


def test_an_unreadable_secure_boot_variable_is_unknown(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.boot_efi(secure_boot=True)
    host.deny("sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c")
    assert trust_of(host)[0].secure_boot == Trust.SECURE_BOOT_UNSPECIFIED


def test_lockdown_states(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.set_lockdown("confidentiality")
    assert trust_of(host)[0].lockdown == Trust.LOCKDOWN_CONFIDENTIALITY
    host.set_lockdown(None)
    assert trust_of(host)[0].lockdown == Trust.LOCKDOWN_NOT_AVAILABLE
    host.write("sys/kernel/security/lockdown", "integrity confidentiality\n")
    trust, warnings = trust_of(host)
    assert trust.lockdown == Trust.LOCKDOWN_UNSPECIFIED
    assert "sys/kernel/security/lockdown" in warnings
    host.remove("sys/kernel/security")
    trust, warnings = trust_of(host)
    assert trust.lockdown == Trust.LOCKDOWN_UNSPECIFIED
    assert "sys/kernel/security" in warnings
    assert trust.signatures == Trust.SIGNATURES_UNSPECIFIED  # sig_enforce N, lockdown unknown


def test_sig_enforce_states(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.set_sig_enforce(None)
    trust, _ = trust_of(host)
    assert trust.sig_enforce == Trust.SIG_ENFORCE_NOT_BUILT
    assert trust.signatures == Trust.SIGNATURES_NOT_ENFORCED
    host.set_sig_enforce("maybe")
    trust, warnings = trust_of(host)
    assert trust.sig_enforce == Trust.SIG_ENFORCE_UNSPECIFIED
    assert "sys/module/module/parameters/sig_enforce" in warnings
    host.set_sig_enforce("Y")
    host.deny("sys/module/module/parameters/sig_enforce")
    assert trust_of(host)[0].sig_enforce == Trust.SIG_ENFORCE_UNSPECIFIED


def test_the_verdict_from_lockdown_and_sig_enforce() -> None:
    enforced, not_enforced, unknown = (
        Signatures.ENFORCED,
        Signatures.NOT_ENFORCED,
        Signatures.UNKNOWN,
    )
    table = {
        (Lockdown.NONE, SigEnforce.ON): enforced,
        (Lockdown.INTEGRITY, SigEnforce.OFF): enforced,
        (Lockdown.CONFIDENTIALITY, SigEnforce.OFF): enforced,
        (Lockdown.NONE, SigEnforce.OFF): not_enforced,
        (Lockdown.NOT_AVAILABLE, SigEnforce.OFF): not_enforced,
        (Lockdown.INTEGRITY, SigEnforce.NOT_BUILT): not_enforced,
        (Lockdown.UNKNOWN, SigEnforce.OFF): unknown,
        (Lockdown.INTEGRITY, SigEnforce.UNKNOWN): unknown,
        (Lockdown.UNKNOWN, SigEnforce.ON): enforced,
    }
    assert {key: judge_signatures(*key) for key in table} == table


def test_a_signed_backport_the_kernel_verified(tmp_path: Path) -> None:
    signature = scenarios.secure_boot_signed_backport(tmp_path).inspect().module.signature
    key = signing_key(MOK_COMMON_NAME, MOK_SERIAL)
    assert signature == Signature(
        verified=Signature.VERIFIED,
        file=Signature.FILE_SIGNED,
        signer=MOK_COMMON_NAME,
        key_id=key.key_id,
        hash_algorithm="sha256",
    )


def test_an_unsigned_backport_is_unverified_and_its_file_unsigned(tmp_path: Path) -> None:
    signature = scenarios.dkms_out_of_tree(tmp_path).inspect().module.signature
    assert signature.verified == Signature.UNVERIFIED  # taint OE
    assert signature.file == Signature.FILE_UNSIGNED


def test_a_module_kmm_loaded_from_its_container_has_no_file_to_read(tmp_path: Path) -> None:
    signature = scenarios.kmm_out_of_tree(tmp_path).inspect().module.signature
    assert signature.file == Signature.FILE_SIGNATURE_UNSPECIFIED
    assert not signature.signer


def test_without_module_signing_no_e_taint_proves_nothing(tmp_path: Path) -> None:
    host = scenarios.arc_b580_in_tree(tmp_path)
    host.set_sig_enforce(None)
    assert host.inspect().module.signature.verified == Signature.VERIFIED_UNSPECIFIED


def test_signature_trailers_that_do_not_parse_are_errors_not_guesses() -> None:
    image = b"\x7fELF module"
    assert read_signature(image) is None
    with pytest.raises(SignatureFormatError):
        read_signature(MAGIC)
    with pytest.raises(SignatureFormatError, match="exceeds"):
        read_signature(image + bytes([0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF]) + MAGIC)
    with pytest.raises(SignatureFormatError, match="not PKCS#7"):
        read_signature(image + bytes([0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]) + MAGIC)
    good = signed(image, signing_key())
    assert read_signature(good) is not None
    not_a_sequence = bytearray(good)
    not_a_sequence[len(image)] = 0x31  # the ContentInfo's tag
    with pytest.raises(SignatureFormatError, match="ContentInfo"):
        read_signature(bytes(not_a_sequence))
    too_long = bytearray(good)
    too_long[len(image) + 1] = 0x84  # a 4-byte length: far past the signature
    with pytest.raises(SignatureFormatError):
        read_signature(bytes(too_long))


def test_an_unreadable_signature_is_a_warning_and_the_file_unknown(tmp_path: Path) -> None:
    host = scenarios.dkms_out_of_tree(tmp_path)
    path = f"lib/modules/{host.kernel_release}/updates/dkms/xe.ko.zst"
    image = zstandard.ZstdDecompressor().decompress(host.real(path).read_bytes())
    garbage = image + bytes([0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 3]) + b"\x30\x01" + MAGIC
    host.write(path, zstandard.ZstdCompressor().compress(garbage))
    report = host.inspect()
    assert report.module.signature.file == Signature.FILE_SIGNATURE_UNSPECIFIED
    assert any("unreadable module signature" in w.message for w in report.warnings)


def test_the_enrolled_mok_keys_are_named_like_modinfo_names_a_signing_key(tmp_path: Path) -> None:
    trust, _ = trust_of(scenarios.secure_boot_signed_backport(tmp_path))
    key = signing_key(MOK_COMMON_NAME, MOK_SERIAL)
    assert [(k.signer, k.key_id) for k in trust.mok_list.keys] == [(MOK_COMMON_NAME, key.key_id)]


def test_several_keys_and_hash_lists_and_none_enrolled(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    other = signing_key("Another fleet key", 0x42)
    host.boot_efi(secure_boot=True, mok_keys=[signing_key(), other])
    trust, _ = trust_of(host)
    assert [k.signer for k in trust.mok_list.keys] == [
        "gpuctl test signing key",
        "Another fleet key",
    ]
    assert trust.mok_list.keys[1].key_id == "42"
    plain = FakeHost(tmp_path / "plain")
    plain.boot_efi(secure_boot=True)  # shim without enrolled keys: no MokListRT
    assert not trust_of(plain)[0].HasField("mok_list")


def test_a_mok_list_that_does_not_parse_is_a_warning_and_unknown(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.boot_efi(secure_boot=True, mok_keys=[signing_key()])
    path = "sys/firmware/efi/efivars/MokListRT-605dab50-e046-4300-abb6-3dd810dd8b23"
    raw = host.real(path).read_bytes()
    host.write(path, raw[:-7])  # a truncated certificate
    trust, warnings = trust_of(host)
    assert not trust.HasField("mok_list")
    assert path in warnings
    with pytest.raises(EfiListError, match="too short"):
        x509_keys(b"\x00" * 10)
    assert x509_keys(b"") == []


def test_mok_list_trusted_is_read_where_the_kernel_reads_it_the_mok_config_table(
    tmp_path: Path,
) -> None:
    """The kernel looks MokListTrustedRT up in shim's MOK config table (machine_keyring.c,
    efi_mokvar_entry_find), exposed as /sys/firmware/efi/mok-variables/: its presence, not
    the runtime variable under efivarfs, decides."""
    key = signing_key(MOK_COMMON_NAME, MOK_SERIAL)
    host = FakeHost(tmp_path)
    host.boot_efi(secure_boot=True, mok_keys=[key])
    trust, _ = trust_of(host)
    assert trust.mok_list_trusted is True
    # The runtime variable alone (no table entry): the kernel did not trust MOK keys.
    host.remove("sys/firmware/efi/mok-variables/MokListTrustedRT")
    assert trust_of(host)[0].mok_list_trusted is False
    # MokListTrusted set (mokutil --untrust-mok): shim mirrors nothing.
    untrusted = FakeHost(tmp_path / "untrusted")
    untrusted.boot_efi(secure_boot=True, mok_keys=[key], mok_list_trusted=False)
    assert trust_of(untrusted)[0].mok_list_trusted is False
    # A BIOS boot: no MOK at all, unset.
    assert not trust_of(FakeHost(tmp_path / "bios"))[0].HasField("mok_list_trusted")


def test_db_keys_and_mok_ignore_db_and_an_ubuntu_kernel_are_reported(tmp_path: Path) -> None:
    firmware_key = signing_key("ACME firmware db key", 0x5DB1)
    host = FakeHost(tmp_path)
    host.boot_efi(secure_boot=True, db_keys=[firmware_key])
    trust, _ = trust_of(host)
    assert [(k.signer, k.key_id) for k in trust.db_keys.keys] == [
        (firmware_key.common_name, firmware_key.key_id)
    ]
    assert not trust.HasField("platform_keys_verify_modules")  # not known: never assumed
    host.write("proc/version_signature", scenarios.UBUNTU_VERSION_SIGNATURE)
    assert trust_of(host)[0].platform_keys_verify_modules is True
    # shim's MokIgnoreDB: the kernel does not load db (load_uefi.c, uefi_check_ignore_db).
    host.write(
        "sys/firmware/efi/efivars/MokIgnoreDB-605dab50-e046-4300-abb6-3dd810dd8b23",
        b"\x06\x00\x00\x00\x01",
    )
    ignored = trust_of(host)[0]
    assert ignored.HasField("db_keys")
    assert list(ignored.db_keys.keys) == []
