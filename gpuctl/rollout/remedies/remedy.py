"""One remedy, and where the troubleshooting page puts it (pure).

A Remedy says, for one BlockKind or HoldKind, what it means, how an admin confirms it and what
to do, and a one-line summary the CLI prints under a Blocked node or a held rollout. Each kind
has its own heading on docs/troubleshooting.md ("Blocked: `open-clients`"), and the anchor of
that heading, as GitHub renders it, is derived from the kind's value alone, so links the CLI
printed stay valid as long as the kind does.

The commands name their arguments in capitals: NAME a GPUDriver, NODE a node, and so on (the
page's introduction lists them); the chart is taken as installed in `gpuctl-system`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuctl.common import names
from gpuctl.rollout.reasons import BlockKind, HoldKind

PAGE = "docs/troubleshooting.md"
# The namespace and the release's fullname the commands assume (docs/deploying.md's install).
NAMESPACE = "gpuctl-system"
COORDINATOR_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:gpuctl-coordinator"

Kind = BlockKind | HoldKind


@dataclass(frozen=True)
class Remedy:
    """What one kind means (one sentence), the commands that confirm it (each may end with a
    `  # what to look for` comment), what to do, and the one line the CLI prints."""

    summary: str
    means: str
    confirm: tuple[str, ...]
    fix: str


def heading(kind: Kind) -> str:
    """The kind's heading on the page: "Blocked: `gpu-pods`", "Held: `Paused`"."""
    state = "Blocked" if isinstance(kind, BlockKind) else "Held"
    return f"{state}: `{kind.value}`"


def slug(text: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, each
    space a `-`."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchor(kind: Kind) -> str:
    """The kind's anchor on the page ("blocked-gpu-pods", "held-paused")."""
    return slug(heading(kind))


def doc_link(kind: Kind) -> str:
    """Where the kind's remedy is, from the repository's root."""
    return f"{PAGE}#{anchor(kind)}"


def annotation(key: str, *, on: str = "node NODE") -> str:
    """The kubectl command that prints one annotation of an object."""
    escaped = key.replace(".", "\\.")
    return f"kubectl get {on} -o jsonpath='{{.metadata.annotations.{escaped}}}'"


# Commands more than one remedy uses.
NODE_REASON = annotation(names.REASON) + "  # the reason in words"
STATUS = "gpuctl rollout status NAME"
INSPECT_FRESH = "gpuctl node inspect NODE --fresh"
NODE_PODS = "kubectl get pods -A --field-selector spec.nodeName=NODE -o wide"
AGENT_PODS = (
    f"kubectl -n {NAMESPACE} get pods -l app.kubernetes.io/component=agent -o wide "
    "--field-selector spec.nodeName=NODE"
)
LEADER_LOG = f"gpuctl version  # the coordinator's leader Pod; then kubectl -n {NAMESPACE} logs POD"
DESCRIBE_DRIVER = "kubectl describe gpudriver NAME  # conditions, status.errors, Warning Events"
ROLLBACK_RECORD = annotation(names.ROLLBACK, on="gpudriver NAME") + "  # from, to, nodes, reason"
SKIP = f"kubectl label node NODE {names.OPT_OUT_LABEL}={names.OPT_OUT_VALUE}"
