"""The .modinfo reader on tiny real ELF64 modules, plain and compressed, and on junk."""

from __future__ import annotations

import gzip
import lzma
from typing import Any

import pytest
import zstandard

from agent.modinfo import ModinfoError, read_modinfo
from testbed.fakehost.elf import module_image

MODINFO = {"name": "xe", "intree": "Y", "srcversion": "ABC123", "alias": ["pci:a", "pci:b"]}
EXPECTED = {"name": ["xe"], "intree": ["Y"], "srcversion": ["ABC123"], "alias": ["pci:a", "pci:b"]}


@pytest.mark.parametrize(
    ("filename", "compress"),
    [
        ("xe.ko", lambda data: data),
        ("xe.ko.zst", lambda data: zstandard.ZstdCompressor().compress(data)),
        ("xe.ko.xz", lambda data: lzma.compress(data, format=lzma.FORMAT_XZ)),
        ("xe.ko.gz", gzip.compress),
    ],
)
def test_reads_modinfo(filename: str, compress: object) -> None:
    assert callable(compress)
    assert read_modinfo(compress(module_image(MODINFO)), filename) == EXPECTED


def test_zstd_stream_without_content_size() -> None:
    compressor = zstandard.ZstdCompressor(write_content_size=False)
    assert read_modinfo(compressor.compress(module_image(MODINFO)), "xe.ko.zst") == EXPECTED


@pytest.mark.parametrize(
    ("data", "filename", "problem"),
    [
        (b"#!/bin/sh\n", "xe.ko", "not an ELF file"),
        (b"\x7fELF\x01\x01" + bytes(60), "xe.ko", "not a 64-bit ELF file"),
        (module_image(MODINFO)[:100], "xe.ko", "section table outside the file"),
        (module_image(MODINFO).replace(b".modinfo", b".notinfo"), "xe.ko", "no .modinfo section"),
        (b"junk", "xe.ko.xz", "cannot decompress"),
        (b"junk", "xe.ko.zst", "cannot decompress"),
    ],
)
def test_rejects_what_is_not_a_module(data: bytes, filename: str, problem: str) -> None:
    with pytest.raises(ModinfoError, match=problem):
        read_modinfo(data, filename)


@pytest.mark.parametrize(
    ("suffix", "compress"),
    [
        (".ko.xz", lambda data: lzma.compress(data, format=lzma.FORMAT_XZ)),
        (".ko.gz", gzip.compress),
        (".ko.zst", lambda data: zstandard.ZstdCompressor().compress(data)),
    ],
)
def test_decompression_stops_at_the_size_limit(suffix: str, compress: Any) -> None:
    """A small compressed file must not take the agent's memory: 4 MiB of zeros, a limit of
    1 MiB (the real one is 512 MiB), refused without decompressing the rest."""
    bomb = compress(bytes(4 << 20))
    assert len(bomb) < 64 << 10
    with pytest.raises(ModinfoError, match="larger than 1048576 bytes"):
        read_modinfo(bomb, "xe" + suffix, max_bytes=1 << 20)
    image = module_image({"name": "xe"})
    assert read_modinfo(compress(image), "xe" + suffix, max_bytes=len(image)) == {"name": ["xe"]}
