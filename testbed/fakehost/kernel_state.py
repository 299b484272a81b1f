"""The kernel a fake host boots and what it accepts: kernels installed, EFI and Secure Boot,
lockdown, signature enforcement, and its modules (loaded in sys/module, files on disk).

The part of `FakeHost` that the agent's kernel trust and module checks read; module files are
tiny real ELF64 modules (elf.py), signed as sign-file signs (signing.py). Apart from the
devices (pci.py) and clients (clients.py) because none of it depends on them.
"""

from __future__ import annotations

import lzma
from collections.abc import Iterable, Mapping, Sequence

import zstandard

from testbed.fakehost.elf import module_image
from testbed.fakehost.files import HostRoot
from testbed.fakehost.signing import SigningKey, efi_signature_lists, signed

EFI_GLOBAL_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
SHIM_GUID = "605dab50-e046-4300-abb6-3dd810dd8b23"
IMAGE_SECURITY_DATABASE_GUID = "d719b2cb-3d3a-4596-a3bc-dad00e67656f"


class KernelState(HostRoot):
    """The kernel's boot, trust and modules; `FakeHost` sets the state below."""

    kernel_release: str
    # modules.dep's lines, one per module file added.
    _dep_lines: list[str]

    def boot_into(self, release: str) -> None:
        """The host boots `release` from now on: installed, `uname -r` and the kernel command
        line say it, and its modules directory has its own modules.dep (what add_module_file
        adds goes there). The caller resets what a boot resets (modules, processes)."""
        self.install_kernel(release)
        self.kernel_release = release
        self._dep_lines = []
        self.write("proc/sys/kernel/osrelease", release + "\n")
        self.write("proc/cmdline", f"BOOT_IMAGE=/boot/vmlinuz-{release} ro quiet\n")

    def install_kernel(self, release: str, *, bls: bool = False) -> None:
        """An installed kernel: /boot/vmlinuz-<release>, or with `bls` /lib/modules/<release>/
        vmlinuz (Fedora's layout); its modules directory either way."""
        self._mkdir(f"lib/modules/{release}")
        self.write(f"lib/modules/{release}/vmlinuz" if bls else f"boot/vmlinuz-{release}", b"")

    def boot_efi(
        self,
        *,
        secure_boot: bool | None,
        shim_validation_disabled: bool | None = None,
        mok_keys: Sequence[SigningKey] = (),
        mok_list_trusted: bool = True,
        db_keys: Sequence[SigningKey] = (),
    ) -> None:
        """An EFI boot: efivarfs with BootCurrent, and the SecureBoot variable (4 attribute
        bytes, then 1 or 0) unless `secure_boot` is None (firmware without Secure Boot);
        shim's MokSBStateRT when `shim_validation_disabled` is not None, and its MokListRT
        with `mok_keys` enrolled (and a blocklisted hash, which names no key). With `mok_keys`
        and `mok_list_trusted` (shim 15.7+'s default, no MokListTrusted variable): shim's
        MokListTrustedRT, the byte 0x01, both as a runtime variable and in its MOK config table
        (/sys/firmware/efi/mok-variables/, raw data, no attribute bytes). `db_keys`: UEFI db.
        Every efivarfs file is as fs/efivarfs/file.c (efivarfs_file_read) serves it: the
        attributes as a little-endian u32 (here BOOTSERVICE|RUNTIME, 0x06), then the data."""
        efivars = "sys/firmware/efi/efivars"
        self.write(f"{efivars}/BootCurrent-{EFI_GLOBAL_GUID}", b"\x06\x00\x00\x00\x01\x00")
        if secure_boot is not None:
            value = b"\x06\x00\x00\x00" + bytes([1 if secure_boot else 0])
            self.write(f"{efivars}/SecureBoot-{EFI_GLOBAL_GUID}", value)
        if shim_validation_disabled is not None:
            value = b"\x06\x00\x00\x00" + bytes([1 if shim_validation_disabled else 0])
            self.write(f"{efivars}/MokSBStateRT-{SHIM_GUID}", value)
        if mok_keys:
            lists = efi_signature_lists(mok_keys, hashes=[bytes(32)])
            self.write(f"{efivars}/MokListRT-{SHIM_GUID}", b"\x06\x00\x00\x00" + lists)
            if mok_list_trusted:
                self.write(f"{efivars}/MokListTrustedRT-{SHIM_GUID}", b"\x06\x00\x00\x00\x01")
                self.write("sys/firmware/efi/mok-variables/MokListTrustedRT", b"\x01")
        if db_keys:
            db = efi_signature_lists(db_keys)
            self.write(f"{efivars}/db-{IMAGE_SECURITY_DATABASE_GUID}", b"\x27\x00\x00\x00" + db)

    def set_lockdown(self, mode: str | None) -> None:
        """/sys/kernel/security/lockdown with `mode` selected; None: securityfs without it
        (a kernel without the lockdown LSM)."""
        self.write("sys/kernel/security/lsm", "capability,landlock,yama,apparmor\n")
        path = "sys/kernel/security/lockdown"
        if mode is None:
            self.remove(path)
            return
        words = ("none", "integrity", "confidentiality")
        self.write(path, " ".join(f"[{w}]" if w == mode else w for w in words) + "\n")

    def set_sig_enforce(self, value: str | None) -> None:
        """module.sig_enforce ("Y", "N"); None: no such parameter (no module signing)."""
        path = "sys/module/module/parameters/sig_enforce"
        if value is None:
            self.remove(path)
        else:
            self.write(path, value + "\n")

    # -- modules ----------------------------------------------------------------------------

    def add_module(
        self,
        name: str,
        *,
        initstate: str = "live",
        refcnt: int = 0,
        holders: Iterable[str] = (),
        parameters: Mapping[str, str] | None = None,
        srcversion: str = "",
        version: str | None = None,
        taint: str = "",
        builtin: bool = False,
    ) -> str:
        """sys/module/<name>. A built-in module gets only parameters/ (and `version`)."""
        base = f"sys/module/{name}"
        self._mkdir(f"{base}/parameters")
        for key, value in (parameters or {}).items():
            self.write(f"{base}/parameters/{key}", value + "\n")
        if version is not None:
            self.write(f"{base}/version", version + "\n")
        if builtin:
            return base
        self.write(f"{base}/initstate", initstate + "\n")
        self.write(f"{base}/refcnt", f"{refcnt}\n")
        self.write(f"{base}/taint", taint + "\n")
        self._mkdir(f"{base}/holders")
        for holder in holders:
            self.symlink(f"{base}/holders/{holder}", f"../../{holder}")
        if srcversion:
            self.write(f"{base}/srcversion", srcversion + "\n")
        self._mkdir(f"{base}/sections")
        self.write(f"{base}/coresize", "4194304\n")
        return base

    def add_module_file(
        self,
        relative: str,
        modinfo: Mapping[str, str | Sequence[str]],
        *,
        compression: str | None = None,
        in_modules_dep: bool = True,
        signed_by: SigningKey | None = None,
    ) -> str:
        """A module file at lib/modules/<release>/<relative> (".zst"/".xz" appended when
        compressed) listed in modules.dep, signed by `signed_by` as sign-file signs. Returns
        its host path ("/lib/modules/...")."""
        image = module_image(modinfo)
        if signed_by is not None:
            image = signed(image, signed_by)
        if compression == "zst":
            relative, data = relative + ".zst", zstandard.ZstdCompressor().compress(image)
        elif compression == "xz":
            relative, data = relative + ".xz", lzma.compress(image, format=lzma.FORMAT_XZ)
        elif compression is None:
            data = image
        else:
            raise ValueError(f"unknown compression {compression!r}")
        base = f"lib/modules/{self.kernel_release}"
        self.write(f"{base}/{relative}", data)
        if in_modules_dep:
            self._dep_lines.append(f"{relative}:\n")
            self.write(f"{base}/modules.dep", "".join(self._dep_lines))
        return f"/{base}/{relative}"
