"""KMM's NodeModulesConfig reconciler as pure rules: which worker Pod runs for a module entry.

Source: internal/controllers/nmc_reconciler.go (Reconcile, ProcessModuleSpec,
ProcessUnconfiguredModuleStatus, SyncStatus, GarbageCollectWorkerPods, UpdateNodeLabels),
internal/node/node.go (IsNodeSchedulable, IsNodeRebooted), internal/pod/workerpodmanager.go
(the worker Pod: one per node and module, restartPolicy OnFailure). Identical in v2.6.0 and main.

A worker Pod is modelled by what it was built from: a loader from the spec entry, an unloader
from the status entry (N2, N4); its template hash differs exactly when that entry differs from
the current one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum

from tests.harness.kmm_model import (
    NodeView,
    SpecEntry,
    StatusEntry,
    ready_label,
    version_ready_label,
)
from tests.harness.kmm_scheduling import configs_equal


class WorkerAction(StrEnum):
    """The ``kmm.node.kubernetes.io/worker-action`` label (P1)."""

    LOAD = "Load"
    UNLOAD = "Unload"


@dataclass(frozen=True)
class WorkerPod:
    """``kmm-worker-<node>-<module>`` (P1): its action, its source entry, its restarts (P3)."""

    action: WorkerAction
    built_from: SpecEntry | StatusEntry
    restarts: int = 0


class Step(Enum):
    NOTHING = "nothing"
    CREATE_LOADER = "create loader"
    CREATE_UNLOADER = "create unloader"
    DELETE_WORKER = "delete worker"
    DROP_STATUS = "drop status"


def rebooted(node: NodeView, status: StatusEntry) -> bool:
    """node.go :: IsNodeRebooted: Ready=True and the boot id is not the status's."""
    return node.ready and node.boot_id != status.boot_id


def process_module_spec(
    spec: SpecEntry, status: StatusEntry | None, worker: WorkerPod | None, node_rebooted: bool
) -> Step:
    """N1-N3 (ProcessModuleSpec), for a spec entry on a schedulable node.

    No worker: no status -> loader (N1a); configs differ on the same kernel -> unloader from
    the status (N2), on another kernel -> loader (N1b); equal and rebooted -> loader (N1c).
    A worker: an unloader is never touched, whatever the spec now says (N3); a loader is
    deleted only once it has restarted and the spec it would now be built from changed.
    """
    if worker is None:
        if status is None:
            return Step.CREATE_LOADER
        if not configs_equal(spec, status):
            if spec.config.kernel_version == status.config.kernel_version:
                return Step.CREATE_UNLOADER
            return Step.CREATE_LOADER
        return Step.CREATE_LOADER if node_rebooted else Step.NOTHING
    if worker.action is WorkerAction.UNLOAD or worker.restarts == 0:
        return Step.NOTHING
    return Step.DELETE_WORKER if worker.built_from != spec else Step.NOTHING


def process_orphan_status(
    status: StatusEntry, worker: WorkerPod | None, node_rebooted: bool
) -> Step:
    """N4 (ProcessUnconfiguredModuleStatus), for a status entry with no spec entry.

    Rebooted: drop the status, no unload. No worker: unloader from the status. A loader: delete
    it (cancelled). An unloader: left alone unless restarted with a different source.
    """
    if node_rebooted:
        return Step.DROP_STATUS
    if worker is None:
        return Step.CREATE_UNLOADER
    if worker.action is WorkerAction.LOAD:
        return Step.DELETE_WORKER
    if worker.restarts > 0 and worker.built_from != status:
        return Step.DELETE_WORKER
    return Step.NOTHING


def is_orphan_worker(spec: SpecEntry | None, status: StatusEntry | None) -> bool:
    """N6/N8 (SyncStatus on a Running pod; GarbageCollectWorkerPods): a worker whose module
    has neither a spec nor a status entry is deleted."""
    return spec is None and status is None


def status_after_load(entry: SpecEntry, boot_id: str) -> StatusEntry:
    """N6 (SyncStatus, Succeeded loader): the status is what the loader was built from (config
    via the worker-config annotation), with the node's current boot id."""
    return StatusEntry(
        config=entry.config,
        version=entry.version,
        tolerations=entry.tolerations,
        image_repo_secret=entry.image_repo_secret,
        service_account=entry.service_account,
        boot_id=boot_id,
    )


def unschedulable_label_removals(
    labels: Mapping[str, str], namespace: str, name: str
) -> dict[str, str | None]:
    """N5 (Reconcile step 4): a spec entry on a node not schedulable for its tolerations is
    skipped, and its ``.ready`` and ``.version.ready`` labels are removed."""
    keys = (ready_label(namespace, name), version_ready_label(namespace, name))
    return {key: None for key in keys if key in labels}


_READY = re.compile(r"^kmm\.node\.kubernetes\.io/([a-zA-Z0-9-]+)\.([a-zA-Z0-9-.]+)\.ready$")


def ready_label_modules(labels: Mapping[str, str], namespace: str) -> set[str]:
    """The Modules of ``namespace`` with a ``.ready`` label on the node (kmmlabels.go ::
    IsKernelModuleReadyNodeLabel: ``.version.ready`` labels are not ready labels)."""
    found = set()
    for key in labels:
        match = _READY.match(key)
        if match and not key.endswith(".version.ready") and match.group(1) == namespace:
            found.add(match.group(2))
    return found


def ready_label_changes(
    labels: Mapping[str, str],
    namespace: str,
    name: str,
    spec: SpecEntry | None,
    status: StatusEntry | None,
) -> dict[str, str | None]:
    """N7 (UpdateNodeLabels): ``.ready`` is added when spec and status configs are equal and
    it is absent, with ``.version.ready=<status version>`` if that is set; both are removed
    when the node has ``.ready`` and neither entry exists. Nothing else changes them (a
    config change keeps ``.ready`` on the node the whole time)."""
    ready = ready_label(namespace, name)
    if spec is None and status is None:
        if ready in labels:
            return {ready: None, version_ready_label(namespace, name): None}
        return {}
    if configs_equal(spec, status) and ready not in labels:
        changes: dict[str, str | None] = {ready: ""}
        if status is not None and status.version:
            changes[version_ready_label(namespace, name)] = status.version
        return changes
    return {}
