"""The fuzz targets by name: module paths, so that a fuzzing process imports (and atheris
instruments) only the target it runs."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import cast

TARGETS: dict[str, str] = {
    "debugfs_clients": "bench.fuzz.target_debugfs_clients",
    "fdinfo": "bench.fuzz.target_fdinfo",
    "cgroup_owner": "bench.fuzz.target_cgroup_owner",
    "sysfs_attributes": "bench.fuzz.target_sysfs_attributes",
    "modinfo": "bench.fuzz.target_modinfo",
    "uevent": "bench.fuzz.target_uevent",
    "inspection": "bench.fuzz.target_inspection",
    "agent_message": "bench.fuzz.target_agent_message",
    "node_request": "bench.fuzz.target_node_request",
}


def load(name: str) -> ModuleType:
    return importlib.import_module(TARGETS[name])


def fuzz_function(module: ModuleType) -> Callable[[bytes], None]:
    return cast(Callable[[bytes], None], module.fuzz_one)


def seeds(module: ModuleType) -> list[bytes]:
    return list(cast(list[bytes], module.SEEDS))
