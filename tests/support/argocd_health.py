"""Runs the Argo CD health check of a GPUDriver (examples/argocd/gpudriver-health.lua) the way
Argo CD does: the object as the global table `obj`, the script as a function body whose return
value is the health. Lua 5.1 (`hack/lua/ensure`, `$GPUCTL_LUA`), the language Argo CD's
gopher-lua implements; a test never skips for want of it.
"""

from __future__ import annotations

import functools
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HEALTH_SCRIPT = REPO / "examples" / "argocd" / "gpudriver-health.lua"
# What Argo CD accepts as a health status.
ARGO_STATUSES = frozenset({"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"})


@dataclass(frozen=True)
class Health:
    status: str
    message: str


@functools.cache
def lua_binary() -> str:
    configured = os.environ.get("GPUCTL_LUA", "")
    if configured:
        return configured
    result = subprocess.run(
        [str(REPO / "hack" / "lua" / "ensure")], stdout=subprocess.PIPE, text=True, check=False
    )
    if result.returncode != 0:
        raise AssertionError(f"hack/lua/ensure failed (exit {result.returncode})")
    return result.stdout.strip()


def lua_string(text: str) -> str:
    """A Lua 5.1 string literal of `text`'s UTF-8 bytes: printable ASCII as is (but quote and
    backslash), every other byte as a decimal escape (Lua 5.1 has no \\u)."""
    out = []
    for byte in text.encode():
        char = chr(byte)
        out.append(char if 32 <= byte < 127 and char not in '"\\' else f"\\{byte:03d}")
    return '"' + "".join(out) + '"'


def lua_value(value: Any) -> str:
    """A JSON value as a Lua literal: objects and arrays as tables (arrays 1-based), null as nil."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return lua_string(value)
    if isinstance(value, list):
        return "{" + ", ".join(lua_value(item) for item in value) + "}"
    if isinstance(value, dict):
        fields = [f"[{lua_string(str(k))}] = {lua_value(v)}" for k, v in value.items()]
        return "{" + ", ".join(fields) + "}"
    raise TypeError(f"not a JSON value: {value!r}")


def argocd_health(obj: dict[str, Any]) -> Health:
    program = (
        f"obj = {lua_value(obj)}\n"
        f"local function health()\n{HEALTH_SCRIPT.read_text()}\nend\n"
        "local hs = health()\n"
        "io.write(hs.status, '\\n', hs.message or '')\n"
    )
    result = subprocess.run(
        [lua_binary(), "-"], input=program, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"lua failed: {result.stderr}"
    status, _, message = result.stdout.partition("\n")
    assert status in ARGO_STATUSES, status
    return Health(status, message)
