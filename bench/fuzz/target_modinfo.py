"""Fuzz the kernel module reader (.ko, .ko.zst, .ko.xz, .ko.gz): `.modinfo` or ModinfoError,
never another exception, and never more memory than the module size limit (libFuzzer's
-rss_limit_mb catches a decompression bomb)."""

from __future__ import annotations

from agent.modinfo import ModinfoError, read_modinfo
from testbed.fakehost.elf import module_image

_SUFFIXES = (".ko", ".ko.zst", ".ko.xz", ".ko.gz")

SEEDS = [
    b"\x00" + module_image({"name": "xe", "srcversion": "ABC", "alias": ["a", "b"]}),
]


def fuzz_one(data: bytes) -> None:
    if not data:
        return
    filename = "xe" + _SUFFIXES[data[0] % len(_SUFFIXES)]
    try:
        info = read_modinfo(data[1:], filename)
    except ModinfoError:
        return
    assert all(isinstance(v, list) for v in info.values())
