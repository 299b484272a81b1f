"""Read the `.modinfo` section of a kernel module file (xe.ko, xe.ko.zst, xe.ko.xz, xe.ko.gz).

`.modinfo` holds NUL-separated "key=value" strings (name, srcversion, version, intree,
vermagic, ...). A small ELF64 section-table reader is enough to find it; compressed modules
are decompressed in memory first (zstandard for .zst, the standard library for .xz/.gz),
never to more than the size limit: a small compressed file must not take the agent's memory.
"""

from __future__ import annotations

import lzma
import struct
import zlib
from collections.abc import Callable

import zstandard

_ELF_MAGIC = b"\x7fELF"
_ELFCLASS64 = 2
_BYTE_ORDER = {1: "<", 2: ">"}
_SECTION_HEADER = "IIQQQQIIQQ"  # name, type, flags, addr, offset, size, link, info, align, entsize
_MAX_MODULE_BYTES = 512 * 1024 * 1024


class ModinfoError(ValueError):
    """The file is not a readable ELF64 kernel module."""


def decompress_module(data: bytes, filename: str, max_bytes: int = _MAX_MODULE_BYTES) -> bytes:
    """The ELF image inside a module file, by its suffix (.ko, .ko.zst, .ko.xz, .ko.gz);
    ModinfoError when it is larger than `max_bytes` (decompression stops there)."""
    try:
        if filename.endswith(".zst"):
            with zstandard.ZstdDecompressor().stream_reader(data) as reader:
                image = _read_bounded(reader.read, max_bytes)
        elif filename.endswith(".xz"):
            xz = lzma.LZMADecompressor()
            image = xz.decompress(data, max_length=max_bytes + 1)
            if not xz.eof and len(image) <= max_bytes:
                raise ModinfoError("cannot decompress: truncated xz stream")
        elif filename.endswith(".gz"):
            gz = zlib.decompressobj(wbits=31)
            image = gz.decompress(data, max_bytes + 1)
            if not gz.eof and len(image) <= max_bytes:
                raise ModinfoError("cannot decompress: truncated gzip stream")
        else:
            image = data
    except (zstandard.ZstdError, lzma.LZMAError, zlib.error, OSError, EOFError) as error:
        raise ModinfoError(f"cannot decompress: {error}") from error
    if len(image) > max_bytes:
        raise ModinfoError(f"module image larger than {max_bytes} bytes")
    return image


def _read_bounded(read: Callable[[int], bytes], max_bytes: int) -> bytes:
    """Read until the end or just past `max_bytes`."""
    chunks: list[bytes] = []
    size = 0
    while size <= max_bytes:
        chunk = read(min(1 << 20, max_bytes + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def elf_section(image: bytes, wanted: str) -> bytes:
    """The contents of the named section of an ELF64 image."""
    if len(image) < 64 or image[:4] != _ELF_MAGIC:
        raise ModinfoError("not an ELF file")
    if image[4] != _ELFCLASS64:
        raise ModinfoError("not a 64-bit ELF file")
    order = _BYTE_ORDER.get(image[5])
    if order is None:
        raise ModinfoError("unknown ELF byte order")
    (section_offset,) = struct.unpack_from(order + "Q", image, 0x28)
    entry_size, count, names_index = struct.unpack_from(order + "HHH", image, 0x3A)
    header = struct.Struct(order + _SECTION_HEADER)
    if entry_size < header.size or section_offset + count * entry_size > len(image):
        raise ModinfoError("section table outside the file")
    if names_index >= count:
        raise ModinfoError("no section name table")

    def section(index: int) -> tuple[int, bytes]:
        fields = header.unpack_from(image, section_offset + index * entry_size)
        name, offset, size = fields[0], fields[4], fields[5]
        if offset + size > len(image):
            raise ModinfoError("section outside the file")
        return name, image[offset : offset + size]

    _, names = section(names_index)
    target = wanted.encode()
    for index in range(count):
        name_offset, content = section(index)
        end = names.find(b"\0", name_offset)
        if names[name_offset:end] == target:
            return content
    raise ModinfoError(f"no {wanted} section")


def parse_modinfo(section: bytes) -> dict[str, list[str]]:
    """key -> values (a key such as `alias` or `depends` may repeat)."""
    info: dict[str, list[str]] = {}
    for entry in section.split(b"\0"):
        key, sep, value = entry.decode(errors="replace").partition("=")
        if sep:
            info.setdefault(key, []).append(value)
    return info


def read_modinfo(
    data: bytes, filename: str, max_bytes: int = _MAX_MODULE_BYTES
) -> dict[str, list[str]]:
    """The `.modinfo` of a module file's bytes; ModinfoError if it has none."""
    return parse_modinfo(elf_section(decompress_module(data, filename, max_bytes), ".modinfo"))
