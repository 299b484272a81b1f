"""Drivers that hand a PCI function to a virtual machine.

A function bound to one of these is in use by a guest, whose users the host cannot see: the
agent treats its VFs as busy, and the CLI shows its clients as unknown, never as zero.
"""

from __future__ import annotations

VM_PASSTHROUGH_DRIVERS = frozenset({"vfio-pci", "xe-vfio-pci", "xe_vfio_pci"})
