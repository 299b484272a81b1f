"""A node's pods as the rollout names, pauses and drains them (plain values, no I/O).

The agent names each process holding a GPU by its pod's UID (agent/cgroup_owner.py); the
coordinator's Pod watch keeps of every pod what turns that UID into words an admin acts on
(namespace, name, the controller that owns it) and what the pause and the drain select on
(labels, readiness). `pod_facts` makes one PodFacts of a watched (or listed) Pod; a pod that
has finished is not on the node any more and is left out (`on_node`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuctl.common import names
from gpuctl.common.gpu_pods import (
    DEFAULT_GPU_RESOURCES,
    FINISHED_PHASES,
    extended_resources,
    is_gpu_resource,
    references_claims,
)

DAEMON_SET = "DaemonSet"
# A static pod's mirror is owned by its Node: nothing can evict or pause it.
NODE_OWNER = "Node"


@dataclass(frozen=True)
class PodFacts:
    namespace: str
    name: str
    uid: str
    # The controller that owns the pod (its ownerReference with controller: true): kind and
    # name, in the pod's namespace ("" for none).
    owner_kind: str = ""
    owner_name: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    # Running with its Ready condition True.
    ready: bool = False
    # The extended resources it requests or limits; and whether it is a GPU pod because it
    # references ResourceClaims where DRA is not served (gpuctl.common.gpu_pods).
    extended: tuple[str, ...] = ()
    unreadable_claims: bool = False
    # Being deleted (deletionTimestamp set): going, not gone.
    deleting: bool = False
    # Its own spec keeps it off a node without names.DRIVER_READY_LABEL (`selects_driver_ready`).
    selects_driver_ready: bool = False

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def owner(self) -> str:
        """The owning controller as `Kind namespace/name` ("" for none): what a paused pod
        must come back from."""
        if not self.owner_kind:
            return ""
        return f"{self.owner_kind} {self.namespace}/{self.owner_name}"

    def uses_gpu(self, resources: Sequence[str] = DEFAULT_GPU_RESOURCES) -> bool:
        """A GPU pod (gpuctl.common.gpu_pods.is_gpu_pod) under the GPUDriver's `resources`."""
        return self.unreadable_claims or any(is_gpu_resource(r, resources) for r in self.extended)

    @property
    def daemon(self) -> bool:
        return self.owner_kind == DAEMON_SET

    def has_labels(self, wanted: Mapping[str, str]) -> bool:
        """Every label of `wanted` is on the pod, with that value (an empty `wanted`: none)."""
        if not wanted:
            return False
        labels = dict(self.labels)
        return all(labels.get(key) == value for key, value in wanted.items())


def controller_of(meta: Mapping[str, Any]) -> tuple[str, str]:
    """The kind and name of the ownerReference marked controller ("", "" for none)."""
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return str(ref.get("kind") or ""), str(ref.get("name") or "")
    return "", ""


def pod_ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    conditions = status.get("conditions") or []
    return any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions
    )


def on_node(pod: Mapping[str, Any]) -> bool:
    """The pod has not finished (Succeeded or Failed): its processes may still run."""
    return (pod.get("status") or {}).get("phase") not in FINISHED_PHASES


# The node affinity operators a node without the label never matches.
_NEEDS_LABEL = ("In", "Exists", "Gt", "Lt")
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _about_label(term: Any) -> list[Mapping[str, Any]]:
    """A node selector term's expressions about names.DRIVER_READY_LABEL."""
    expressions = term.get("matchExpressions") if isinstance(term, Mapping) else None
    return [
        e
        for e in expressions or []
        if isinstance(e, Mapping) and e.get("key") == names.DRIVER_READY_LABEL
    ]


def _needs_label(term: Any) -> bool:
    """A node without the label never matches the term (its expressions are ANDed)."""
    return any(e.get("operator") in _NEEDS_LABEL for e in _about_label(term))


def driver_ready_selection(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What of a pod's spec says whether it selects on names.DRIVER_READY_LABEL: its
    nodeSelector's entry for the label and its required node affinity terms with only their
    expressions about the label ({} for neither). `selects_driver_ready` reads the same from
    this as from the whole spec."""
    kept: dict[str, Any] = {}
    selector = spec.get("nodeSelector") or {}
    if names.DRIVER_READY_LABEL in selector:
        kept["nodeSelector"] = {names.DRIVER_READY_LABEL: selector[names.DRIVER_READY_LABEL]}
    terms = _required_terms(spec)
    if terms:
        about = [{"matchExpressions": _about_label(t)} for t in terms]
        required = {"nodeSelectorTerms": about}
        kept["affinity"] = {"nodeAffinity": {_REQUIRED: required}}
    return kept


def _required_terms(spec: Mapping[str, Any]) -> list[Any]:
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get(_REQUIRED) or {}
    return list(required.get("nodeSelectorTerms") or [])


def selects_driver_ready(spec: Mapping[str, Any]) -> bool:
    """The pod's own spec keeps it off a node without names.DRIVER_READY_LABEL: its
    nodeSelector asks for the label, or every required node affinity term does.

    Only the nodeSelector shows on a DaemonSet's pod: its controller copies the template's
    nodeSelector into the pod but replaces the pod's required node affinity terms with one
    naming its node, so a DaemonSet selecting through node affinity has pods that do not show
    it. False here is "not shown", not "does not select" (pause.not_selecting tells that).
    """
    selector = spec.get("nodeSelector") or {}
    if selector.get(names.DRIVER_READY_LABEL) == names.DRIVER_READY_VALUE:
        return True
    terms = _required_terms(spec)
    return bool(terms) and all(_needs_label(t) for t in terms)


def pod_facts(pod: Mapping[str, Any], *, dra_served: bool = True) -> PodFacts:
    meta = pod.get("metadata") or {}
    kind, name = controller_of(meta)
    labels = meta.get("labels") or {}
    return PodFacts(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        owner_kind=kind,
        owner_name=name,
        labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
        ready=pod_ready(pod),
        extended=extended_resources(pod),
        unreadable_claims=not dra_served and references_claims(pod),
        deleting=bool(meta.get("deletionTimestamp")),
        selects_driver_ready=selects_driver_ready(pod.get("spec") or {}),
    )


def node_pod_facts(
    pods: Iterable[Mapping[str, Any]], *, dra_served: bool = True
) -> tuple[PodFacts, ...]:
    """The pods of one node that have not finished, sorted by namespace/name."""
    found = [pod_facts(p, dra_served=dra_served) for p in pods if on_node(p)]
    return tuple(sorted(found, key=str))
