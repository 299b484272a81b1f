"""Fake host roots: a host's sysfs, procfs, /lib/modules, /boot and efivarfs under a folder.

`FakeHost` (host.py) builds one; it is imported here because most tests say
`from testbed.fakehost import FakeHost` - the package's public face, and the one name it
re-exports. Its parts and the rest live in their own modules, imported from there:

- `host` - `FakeHost`, `DEFAULT_RELEASE`, `FIXED_NOW` (the clock hosts are inspected at),
  and the injected faults (`deny`);
- `files` - the root's plain files; `pci` - PCI functions and VFs (`PCI_DEVICES`);
  `clients` - DRM nodes, processes and the kernel's DRM client lists; `kernel_state` - the
  kernel's boot, trust (EFI, lockdown, sig_enforce) and modules;
- `drm_text` - the debugfs `clients` and fdinfo texts (`DEBUGFS_STYLES`); `faults` - readers
  that fail where a test denied an entry, or see no debugfs;
- `elf` - tiny real ELF64 modules; `signing` - keys and module signatures as sign-file makes;
- `scenarios` - one builder per node layout of ../shared/fixtures.md; `large_node` - the
  benchmarks' large synthetic node.
"""

from testbed.fakehost.host import FakeHost

__all__ = ["FakeHost"]
