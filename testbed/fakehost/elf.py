"""Write tiny but real ELF64 kernel-module images: an ELF header, a `.modinfo` section of
NUL-separated "key=value" strings and a section name table - all the agent reads."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_ET_REL = 1
_EM_X86_64 = 62
_SHT_PROGBITS = 1
_SHT_STRTAB = 3
_SHF_ALLOC = 2


def modinfo_bytes(modinfo: Mapping[str, str | Sequence[str]]) -> bytes:
    entries = []
    for key, value in modinfo.items():
        values = [value] if isinstance(value, str) else list(value)
        entries += [f"{key}={v}".encode() + b"\0" for v in values]
    return b"".join(entries)


def module_image(modinfo: Mapping[str, str | Sequence[str]]) -> bytes:
    """An ELF64 relocatable object (what a .ko is) whose .modinfo holds `modinfo`."""
    names = b"\0.modinfo\0.shstrtab\0"
    info = modinfo_bytes(modinfo)
    info_offset = _HEADER.size
    names_offset = info_offset + len(info)
    section_offset = (names_offset + len(names) + 7) // 8 * 8
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header = _HEADER.pack(
        ident, _ET_REL, _EM_X86_64, 1, 0, 0, section_offset, 0,
        _HEADER.size, 0, 0, _SECTION.size, 3, 2,
    )  # fmt: skip
    sections = (
        _SECTION.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        + _SECTION.pack(1, _SHT_PROGBITS, _SHF_ALLOC, 0, info_offset, len(info), 0, 0, 1, 0)
        + _SECTION.pack(10, _SHT_STRTAB, 0, 0, names_offset, len(names), 0, 0, 1, 0)
    )
    padding = bytes(section_offset - names_offset - len(names))
    return header + info + names + padding + sections
