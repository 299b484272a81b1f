"""The fake kernel checks module signatures as module_sig_check does: what it refuses, with
which words, and the taint of what it loads (plain data, fake host roots; no processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.fakehost import FakeHost
from testbed.fakehost.elf import module_image
from testbed.fakehost.scenarios import arc_b580_in_tree
from testbed.fakehost.signing import SigningKey, signed, signing_key
from testbed.harness.kubelet import kernel, modprobe, signature_check
from testbed.harness.kubelet.catalogue import ImageCatalogue

B580 = "0000:03:00.0"
XE = {"name": "xe", "version": "v9", "srcversion": "S9", "alias": ["pci:v00008086d0000E20Bsv*"]}
REJECTED = "Key was rejected by service"  # EKEYREJECTED
NOT_PERMITTED = "Operation not permitted"  # EPERM


def trusted() -> SigningKey:
    return signing_key("fleet module signing", 0x51A7)


def stranger() -> SigningKey:
    return signing_key("somebody else's key", 0x0BAD)


def idle_node(path: Path) -> FakeHost:
    """A B580 whose in-tree xe is gone: nothing loaded, nothing bound."""
    host = arc_b580_in_tree(path)
    kernel.remove(host.root, "xe")
    return host


def secure_boot(path: Path, *, lockdown: str = "integrity", sig_enforce: str = "N") -> FakeHost:
    """Secure Boot with `trusted()` enrolled as a Machine Owner Key."""
    host = idle_node(path)
    host.boot_efi(secure_boot=True, shim_validation_disabled=False, mok_keys=[trusted()])
    host.set_lockdown(lockdown)
    host.set_sig_enforce(sig_enforce)
    return host


def load(host: FakeHost, image: bytes) -> str:
    """Loads xe from `image`; returns its taint."""
    modinfo = {key: [value] if isinstance(value, str) else value for key, value in XE.items()}
    kernel.load(host.root, "xe", modinfo, {}, image=image)
    return host.real("sys/module/xe/taint").read_text().strip()


UNSIGNED = module_image(XE)


def test_a_module_signed_with_an_enrolled_key_loads_verified(tmp_path: Path) -> None:
    host = secure_boot(tmp_path)
    assert load(host, signed(UNSIGNED, trusted())) == "O"
    assert kernel.driver_of(host.root, B580) == "xe"


@pytest.mark.parametrize(
    ("lockdown", "sig_enforce", "words"),
    [
        ("integrity", "N", NOT_PERMITTED),
        ("confidentiality", "N", NOT_PERMITTED),
        ("none", "Y", REJECTED),
        ("integrity", "Y", REJECTED),  # sig_enforce is asked first
    ],
)
@pytest.mark.parametrize("what", ["unsigned", "untrusted"])
def test_an_enforcing_kernel_refuses_what_it_cannot_verify(
    tmp_path: Path, lockdown: str, sig_enforce: str, words: str, what: str
) -> None:
    host = secure_boot(tmp_path, lockdown=lockdown, sig_enforce=sig_enforce)
    image = UNSIGNED if what == "unsigned" else signed(UNSIGNED, stranger())
    with pytest.raises(kernel.LoadRefusedError, match=f"^{words}$"):
        load(host, image)
    assert not kernel.is_live(host.root, "xe")
    assert kernel.driver_of(host.root, B580) is None


@pytest.mark.parametrize(
    ("image", "taint"),
    [
        (UNSIGNED, "OE"),
        (signed(UNSIGNED, stranger()), "OE"),
        (signed(UNSIGNED, trusted()), "O"),
    ],
    ids=["unsigned", "untrusted", "trusted"],
)
def test_a_kernel_that_does_not_enforce_loads_anything(
    tmp_path: Path, image: bytes, taint: str
) -> None:
    host = secure_boot(tmp_path, lockdown="none")
    assert load(host, image) == taint


def test_a_kernel_without_module_signing_checks_and_taints_nothing(tmp_path: Path) -> None:
    host = idle_node(tmp_path)
    host.set_sig_enforce(None)
    assert load(host, UNSIGNED) == "O"


def test_a_signature_that_does_not_verify_is_refused_even_when_not_enforcing(
    tmp_path: Path,
) -> None:
    """Signed by a trusted key's name, but not over these bytes: module_sig_check's fatal
    case (a forged or corrupted module), whatever sig_enforce and lockdown say."""
    host = secure_boot(tmp_path, lockdown="none")
    good = signed(UNSIGNED, trusted())
    tampered = good.replace(b"version=v9", b"version=v8")
    with pytest.raises(kernel.LoadRefusedError, match=f"^{REJECTED}$"):
        load(host, tampered)


def test_an_unreadable_signature_is_refused_even_when_not_enforcing(tmp_path: Path) -> None:
    host = idle_node(tmp_path)
    garbage = (
        UNSIGNED + b"\0" * 8 + b"\0\0\2\0\0\0\0\0\0\0\0\x08" + b"~Module signature appended~\n"
    )
    with pytest.raises(kernel.LoadRefusedError, match=r"^Bad message$"):
        load(host, garbage)


def test_a_built_in_key_is_trusted_without_being_enrolled(tmp_path: Path) -> None:
    host = idle_node(tmp_path)
    host.set_sig_enforce("Y")
    signature_check.trust_builtin_key(host.root, trusted().certificate_der)
    assert load(host, signed(UNSIGNED, trusted())) == "O"
    kernel.remove(host.root, "xe")
    with pytest.raises(kernel.LoadRefusedError, match=f"^{REJECTED}$"):
        load(host, signed(UNSIGNED, stranger()))


def test_a_built_in_key_named_without_its_certificate_is_trusted_by_name(tmp_path: Path) -> None:
    host = idle_node(tmp_path)
    host.set_sig_enforce("Y")
    key = stranger()
    host.write(signature_check.BUILTIN_KEYS, f"{key.common_name}\t{key.key_id}\n")
    assert load(host, signed(UNSIGNED, key)) == "O"


def test_what_the_root_says_of_its_kernel(tmp_path: Path) -> None:
    host = idle_node(tmp_path)
    assert not signature_check.enforces_signatures(host.root)  # FakeHost's default
    host.set_lockdown("integrity")
    assert signature_check.lockdown(host.root) == "integrity"
    assert signature_check.enforces_signatures(host.root)
    host.set_lockdown(None)
    host.set_sig_enforce("Y")
    assert signature_check.enforces_signatures(host.root)
    host.set_sig_enforce("maybe")
    with pytest.raises(signature_check.KernelStateError, match="not Y or N"):
        signature_check.enforces_signatures(host.root)


def test_the_enrolled_keys_are_those_boot_efi_wrote(tmp_path: Path) -> None:
    host = idle_node(tmp_path)
    host.boot_efi(secure_boot=True, mok_keys=[trusted(), stranger()])
    keys = signature_check.mok_keys(host.root)
    assert [(k.identity.signer, k.identity.key_id) for k in keys] == [
        ("fleet module signing", "51:A7"),
        ("somebody else's key", "0B:AD"),
    ]
    assert keys[0].certificate == trusted().certificate_der
    host.write(signature_check.MOK_LIST_RT, b"\x06\0\0\0garbage")  # the kernel skips it
    assert signature_check.mok_keys(host.root) == []


def test_a_node_told_to_refuse_loads_refuses_even_a_verified_module(tmp_path: Path) -> None:
    host = secure_boot(tmp_path)
    host.write(kernel.REFUSES_LOADS, "Exec format error\n")
    with pytest.raises(kernel.LoadRefusedError, match=r"^Exec format error$"):
        load(host, signed(UNSIGNED, trusted()))


def test_modprobe_hands_the_module_file_to_the_kernel(tmp_path: Path) -> None:
    host = secure_boot(tmp_path / "node")
    target = modprobe.Node(host.root, host.kernel_release, tmp_path / "record", "n1", "pod-1")
    images = ImageCatalogue(tmp_path / "registry")
    plain = images.add_xe_image("r/xe:1", [host.kernel_release], version="v9", srcversion="S9")
    out: list[str] = []
    assert modprobe.load(target, modprobe.parse(["-d", str(plain / "opt"), "xe"]), out) == 1
    assert out == [f"modprobe: ERROR: could not insert 'xe': {NOT_PERMITTED}"]
    good = images.add_xe_image(
        "r/xe:1-signed", [host.kernel_release], version="v9", srcversion="S9", signed_with=trusted()
    )
    assert modprobe.load(target, modprobe.parse(["-d", str(good / "opt"), "xe"]), []) == 0
    assert host.real("sys/module/xe/taint").read_text() == "O\n"
