"""Fuzz the parsers of single-value sysfs attributes (hex, decimal): a number or None with a
warning, never an exception."""

from __future__ import annotations

from agent.sysattr import parse_decimal, parse_hex
from agent.warninglog import WarningLog

SEEDS = [b"0x8086\n", b"-1\n", b"e223", b"12"]


def fuzz_one(data: bytes) -> None:
    text = data.decode(errors="replace").strip()
    log = WarningLog()
    for parse in (parse_hex, parse_decimal):
        value = parse(text, "sys/bus/pci/devices/x/attr", log)
        assert value is not None or log.entries
