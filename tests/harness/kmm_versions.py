"""KMM's ordered-upgrade labels (V1, V2) as pure rules over one node's labels.

Sources: internal/controllers/module_version_label_action_table.go (labelActionTable),
internal/controllers/node_label_module_version_reconciler.go (getLabelsPerModules,
getModuleVersionLabelsState, getLabelAndAction, reconcileLabels, verifyLabelDeleteValidity,
verifyLabelAddValidity), internal/utils/kmmlabels.go, internal/constants/constants.go.

The admin sets ``kmm.node.kubernetes.io/version-module.<ns>.<name>``; KMM follows it with its
internal worker label (which gates the NMC entry, M5) and schedule label (which gates the
device-plugin DaemonSet), one action per reconcile. The schedule label is v2.6.0's
``beta.kmm.node.kubernetes.io/version-device-plugin.<ns>.<name>``; main renamed it
``version-schedule-pod`` (commit b203292) with the same table.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

from tests.harness.kmm_model import ready_label, version_module_label
from tests.harness.kmm_scheduling import worker_version_label

MODULE_PREFIX = "kmm.node.kubernetes.io/version-module"
WORKER_PREFIX = "beta.kmm.node.kubernetes.io/version-worker-pod"
SCHEDULE_PREFIX = "beta.kmm.node.kubernetes.io/version-device-plugin"


def schedule_version_label(namespace: str, name: str) -> str:
    """kmmlabels.go :: GetDevicePluginVersionLabelName (v2.6.0; main: version-schedule-pod)."""
    return f"{SCHEDULE_PREFIX}.{namespace}.{name}"


class State(Enum):
    MISSING = "missing"
    PRESENT = "present"
    DIFFERENT = "different"


class Which(Enum):
    WORKER = "worker"
    SCHEDULE = "schedule"


M, P, D = State.MISSING, State.PRESENT, State.DIFFERENT

# V1 (module_version_label_action_table.go :: labelActionTable): (module, worker, schedule)
# -> (label, add?). Add sets the module label's value. Combinations not listed: nothing.
ACTION_TABLE: dict[tuple[State, State, State], tuple[Which, bool]] = {
    (M, P, P): (Which.SCHEDULE, False),
    (M, P, M): (Which.WORKER, False),
    (P, M, M): (Which.WORKER, True),
    (P, P, M): (Which.SCHEDULE, True),
    (P, D, D): (Which.SCHEDULE, False),
    (P, D, M): (Which.WORKER, False),
}


def label_states(module: str, worker: str, schedule: str) -> tuple[State, State, State]:
    """V1 (getModuleVersionLabelsState): "" is missing; worker and schedule are "different"
    when they differ from the module label, only while the module label is present."""

    def state(value: str) -> State:
        if not value:
            return M
        return D if module and value != module else P

    return (P if module else M, state(worker), state(schedule))


def modules_with_version_labels(labels: Mapping[str, str], namespace: str) -> set[str]:
    """getLabelsPerModules: the Modules of ``namespace`` any version label names (the last two
    dot-separated parts of the key are namespace and name)."""
    found = set()
    for key in labels:
        if key.startswith((MODULE_PREFIX, WORKER_PREFIX, SCHEDULE_PREFIX)):
            parts = key.split(".")
            if len(parts) >= 2 and parts[-2] == namespace:
                found.add(parts[-1])
    return found


def label_change(
    labels: Mapping[str, str], namespace: str, name: str, *, schedule_pods_on_node: bool = False
) -> dict[str, str | None]:
    """One reconcile of Module ``name``'s version labels on a node: {label: value or None}.

    V2 guards (reconcileLabels): the worker label is deleted only when no device-plugin pod of
    the module is on the node (``schedule_pods_on_node``: the emulator runs none), and added
    only while the node has no ``.ready`` label for it; otherwise nothing changes (KMM
    requeues).
    """
    module = labels.get(version_module_label(namespace, name), "")
    worker_key = worker_version_label(namespace, name)
    schedule_key = schedule_version_label(namespace, name)
    states = label_states(module, labels.get(worker_key, ""), labels.get(schedule_key, ""))
    action = ACTION_TABLE.get(states)
    if action is None:
        return {}
    which, add = action
    key = worker_key if which is Which.WORKER else schedule_key
    if which is Which.WORKER and not add and schedule_pods_on_node:
        return {}
    if which is Which.WORKER and add and ready_label(namespace, name) in labels:
        return {}
    return {key: module if add else None}


def label_changes(labels: Mapping[str, str], namespace: str) -> dict[str, str | None]:
    """One reconcile of every Module of ``namespace`` with version labels on the node."""
    changes: dict[str, str | None] = {}
    for name in sorted(modules_with_version_labels(labels, namespace)):
        changes.update(label_change(labels, namespace, name))
    return changes
