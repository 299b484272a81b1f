"""`gpuctl rollout history` and the choice `gpuctl rollout undo` makes. Pure: objects in, text
and patches out.

The coordinator records the revisions a GPUDriver rolled out in `status.revisions`
(gpuctl.gpudriver.revisions). Undo, like `kubectl rollout undo`, rewrites `spec.kernelModule`
from the chosen revision: the rollout then takes the fleet there node by node with the same
settings and checks (the hold after the first node included), and the coordinator records it
as a new revision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.cli.errors import CommandError
from gpuctl.cli.table import format_table
from gpuctl.common import names
from gpuctl.gpudriver import revisions as rev

HEADERS = ("REVISION", "VERSION", "IMAGES", "NODES", "ROLLED OUT", "COMPLETED")


def _current_version(driver: Mapping[str, Any]) -> str:
    return str(((driver.get("status") or {}).get("rollout") or {}).get("targetVersion") or "")


def render_history(driver: Mapping[str, Any]) -> str:
    """The revisions, oldest first; the one the rollout targets now is marked."""
    name = str((driver.get("metadata") or {}).get("name", ""))
    entries = rev.of_status(driver)
    if not entries:
        return f"GPUDriver {name}: no revision recorded yet\n"
    current = _current_version(driver)
    rows = []
    for entry in entries:
        number = str(entry[rev.REVISION])
        if entry.get(rev.VERSION) == current:
            number += " (current)"
        rows.append(
            [
                number,
                str(entry.get(rev.VERSION, "")),
                ",".join(str(i) for i in entry.get(rev.IMAGES) or []) or "-",
                str(entry.get(rev.NODES, 0)),
                str(entry.get(rev.ROLLED_OUT_AT, "")) or "-",
                str(entry.get(rev.COMPLETED_AT, "")) or "-",
            ]
        )
    rollback = rev.read_rollback(driver)
    note = ""
    if rollback:
        note = (
            f"rolled back by the coordinator from {rollback.get('from')} to "
            f"{rollback.get('to')}: {rollback.get('reason')}\n"
        )
    return f"GPUDriver {name}:\n" + format_table(HEADERS, rows) + note


@dataclass(frozen=True)
class Undo:
    """The patch that undoes, and the revision it goes to."""

    revision: Mapping[str, Any]
    patch: dict[str, Any]


def plan_undo(driver: Mapping[str, Any], to_revision: int | None) -> Undo:
    """The revision `gpuctl rollout undo` goes to (`to_revision`, else the newest of another
    version than the current one) and the patch of the GPUDriver that goes there."""
    entries = rev.of_status(driver)
    current = _current_version(driver) or (entries[-1][rev.VERSION] if entries else "")
    try:
        if to_revision is None:
            entry = rev.previous(entries, current)
        else:
            entry = rev.numbered(entries, to_revision)
        if entry.get(rev.VERSION) == current:
            raise rev.RevisionError(
                f"revision {entry[rev.REVISION]} is the current one ({current}): nothing to undo"
            )
        patch = rev.restore_patch(driver, entry, {names.ROLLBACK: None})
    except rev.RevisionError as err:
        raise CommandError(str(err)) from None
    return Undo(entry, patch)
