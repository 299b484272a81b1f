"""The .modinfo reader on tiny real ELF64 modules, plain and compressed, and on junk."""

from __future__ import annotations

import gzip
import lzma

import pytest
import zstandard

from agent.modinfo import ModinfoError, read_modinfo
from tests.fakehost.elf import module_image

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
