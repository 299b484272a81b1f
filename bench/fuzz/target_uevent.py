"""Fuzz the uevent filter with arbitrary actions, subsystems and properties: True or False,
never an exception."""

from __future__ import annotations

import atheris

from agent.daemon.uevents import UEvent, is_relevant

SEEDS = [b"\x01add\x00pci\x00PCI_ID\x008086:E20B\x00PCI_CLASS\x0030000"]


def fuzz_one(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    action = provider.ConsumeUnicodeNoSurrogates(8)
    subsystem = provider.ConsumeUnicodeNoSurrogates(8)
    properties = {}
    for _ in range(provider.ConsumeIntInRange(0, 4)):
        key = provider.PickValueInList(["PCI_ID", "PCI_CLASS", "DRIVER", "MODALIAS"])
        properties[key] = provider.ConsumeUnicodeNoSurrogates(24)
    assert is_relevant(UEvent(action, subsystem, "/sys/x", properties)) in (True, False)
