"""Decide whether the loaded xe is the kernel's own (in-tree) or the out-of-tree backport.

Pure decision logic over facts already read. Out-of-tree signs: taint `O`, a backport
version string, a matching file without `intree=Y`. In-tree signs: built in, a matching file
with `intree=Y`, or no version file and no `O` taint. Contradicting or unreadable evidence
gives UNKNOWN; the evidence is always spelled out in words.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from agent.kmod import ModuleState

_USING_BACKPORTS = re.compile(r"using backports\s+(\S+)")
_BACKPORT_TAG = re.compile(r"\b(xebr?_v\S+)")


class Provenance(enum.Enum):
    # Nothing loaded: no provenance to tell.
    NONE = "PROVENANCE_UNSPECIFIED"
    IN_TREE = "IN_TREE"
    OUT_OF_TREE = "OUT_OF_TREE"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True, slots=True)
class ProvenanceVerdict:
    provenance: Provenance
    evidence: str


def parse_backport_tag(version: str) -> str:
    """ "xeb_v6.17.13.62_260409.8" from "backported from (..) using backports xeb_v... for
    6.8.0-60-generic Kernel"; release tags ("xebr_v...") parse the same way. "" if none."""
    match = _USING_BACKPORTS.search(version) or _BACKPORT_TAG.search(version)
    return match.group(1) if match else ""


def judge_provenance(
    state: ModuleState,
    *,
    taint: str | None,
    version: str | None,
    file_intree: bool | None,
    filename: str = "",
) -> ProvenanceVerdict:
    """`taint`/`version`: None when unreadable, "" when absent. `file_intree`: whether the
    matching file on the host has intree=Y; None when no matching file was found."""
    if state is ModuleState.NOT_LOADED:
        return ProvenanceVerdict(Provenance.NONE, "not loaded")
    if state is ModuleState.BUILTIN:
        return ProvenanceVerdict(Provenance.IN_TREE, "built into the kernel")
    out_of_tree: list[str] = []
    in_tree: list[str] = []
    unreadable = [name for name, value in (("taint", taint), ("version", version)) if value is None]
    if taint is not None and "O" in taint:
        out_of_tree.append(f"taint {taint!r} includes O (out-of-tree module)")
    tag = parse_backport_tag(version or "")
    if tag or "backport" in (version or "").lower():
        out_of_tree.append(f"version names a backport ({tag or version!r})")
    if file_intree is True:
        in_tree.append(f"{filename} has intree=Y")
    elif file_intree is False:
        out_of_tree.append(f"{filename} lacks intree=Y")
    if taint is not None and "O" not in taint and version == "":
        in_tree.append("no O taint and no version file, as the kernel's own xe")
    return _weigh(out_of_tree, in_tree, unreadable, version)


def _weigh(
    out_of_tree: list[str], in_tree: list[str], unreadable: list[str], version: str | None
) -> ProvenanceVerdict:
    if out_of_tree and in_tree:
        return ProvenanceVerdict(
            Provenance.UNKNOWN, "contradicting evidence: " + "; ".join(out_of_tree + in_tree)
        )
    if out_of_tree or in_tree:
        kind = Provenance.OUT_OF_TREE if out_of_tree else Provenance.IN_TREE
        return ProvenanceVerdict(kind, "; ".join(out_of_tree or in_tree))
    if unreadable:
        return ProvenanceVerdict(
            Provenance.UNKNOWN, f"could not read the module's {' and '.join(unreadable)}"
        )
    return ProvenanceVerdict(
        Provenance.UNKNOWN,
        f"version {version!r} without O taint and no matching file with intree=Y",
    )
