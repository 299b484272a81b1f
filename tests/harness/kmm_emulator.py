"""A test-side stand-in for Kernel Module Management (KMM), which needs real kernels.

It watches the Modules of one namespace and all Nodes on a real API server (the Nodes
through a cache, ``node_cache``, as KMM reads them through controller-runtime's), keeps KMM's
NodeModulesConfig (NMC) and worker Pods in memory, writes the Node labels and Module status KMM
writes (several Nodes at once), and records every unload (``kmm_safety``). It models KMM v2.6.0
(kubernetes-sigs/kernel-module-management); where main differs it says so. The rules, each
naming its KMM file and its id in the KMM rules notes, are pure functions in:

- ``kmm_scheduling`` - the Module reconciler (module_reconciler.go, node.go, kernelmapper.go):
  targets = selector labels equal (M1) and no untolerated NoSchedule/NoExecute taint, with
  KMM's pressure tolerations added (M2, M3); the first kernelMapping in list order, literal
  then unanchored regexp, kernel with one trailing "+" dropped (M4); add / delete / leave per
  the worker version label (M5); the NMC spec entry (M6); status counts (M8).
- ``kmm_versions`` - the ordered-upgrade labels (module_version_label_action_table.go,
  node_label_module_version_reconciler.go; V1, V2), written on the Nodes.
- ``kmm_nmc`` - the NMC reconciler (nmc_reconciler.go): loader / unloader / cancel decisions
  (N1-N4, an unloader is never cancelled), unschedulable entries skipped (N5), status from a
  finished loader (N6), the ``.ready`` / ``.version.ready`` labels (N7), orphan workers (N8).
- ``kmm_worker`` - the worker Pod (worker.go): a loader first removes the live
  ``inTreeModulesToRemove`` (W1), so a load where ``xe`` is live unloads that ``xe``; an
  unloader removes modulesLoadingOrder in list order, else moduleName (W4, main; v2.6.0 passes
  only moduleName and lets the softdep config remove the rest, W5).

Each pass, in this order: finished workers update the NMC status (SyncStatus, N6); the version
labels take one step (V1); every Module is reconciled (finalizer, NMC spec entries, status;
on deletion its entries are removed and the finalizer goes once no NMC has the module in use,
M7); every NMC is reconciled (workers created or deleted, in-use marks and ready labels).
Workers retry a failed run every second (restartPolicy OnFailure; P3), for ever.

Tests steer it:

- ``delay_node(node, s)``: every later worker on ``node`` runs ``s`` after it is created.
- ``fail_node(node)``: loader Pods there fail before running (nothing is touched), and retry.
- ``set_busy(node, reason, held=False)`` / ``clear_busy(node)`` / ``busy_when(predicate)``: the
  node's devices are in use; ``held``: a module refcount is held, so ``modprobe -r`` fails with
  EBUSY and the worker retries. ``unload_attempts()``, ``unloads_while_busy()`` and
  ``assert_no_unload_while_busy()`` read the record.
- ``set_live_modules(node, names)``: kernel modules live on the host that KMM did not load
  (an in-tree ``xe``). The emulator adds what its loaders load and takes away what unloads
  remove (``live_modules``).
- ``on_change(callback)``: ``callback(module, node, loaded)`` after each completed load
  (``loaded`` set) or unloader (``loaded`` None), before the node's labels say so, as a real load
  changes the host before KMM reports it: tests use it to make a fake host root show what the
  emulator loaded. ``on_unload_attempt(callback)``: ``callback(attempt)`` for every attempt,
  including a loader's in-tree removal.
- ``loaded``, ``status_entry``, ``spec_entry``, ``worker_action`` read the in-memory NMC.

Not modelled: images and the ModuleImagesConfig (every image exists, M6), builds, signing,
device plugins (nothing blocks the worker label's removal, V2), the webhooks (H1-H4: a version
toggled in place is not refused) and the namespace label (H5), NMC objects and worker Pods in
the API, the kubelet's growing restart backoff (a flat second here), a NoExecute taint evicting
a worker Pod, firmware files, events; a reboot (a new ``bootID``) is honoured by the N1/N4
decisions but does not empty ``live_modules``. A real cluster's node-lifecycle controller
taints a cordoned Node ``node.kubernetes.io/unschedulable:NoSchedule``; here
``cordon_taint.CordonTaintMirror`` (fixture ``cordon_taints``) plays that part.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client as k8s

from tests.harness import kmm_nmc as nmc_rules
from tests.harness import kmm_scheduling as scheduling
from tests.harness import kmm_versions as versions
from tests.harness import kmm_worker as worker_rules
from tests.harness.kmm_model import (
    FINALIZER,
    GROUP,
    PLURAL,
    VERSION,
    Loaded,
    ModuleView,
    NodeView,
    SpecEntry,
    StatusEntry,
)
from tests.harness.kmm_safety import Busy, Cause, UnloadAttempt, UnloadRecord
from tests.harness.node_cache import NodeCache
from tests.harness.watch_wakeup import WatchWakeup

RESYNC_SECONDS = 5.0
RESTART_SECONDS = 1.0  # a failed worker container runs again (kubelet backoff, shortened)
ERROR_RETRY_SECONDS = 0.5
HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
LABEL_WRITERS = 6  # below the API client's default pool of 10 connections, with the watches

ChangeCallback = Callable[[str, str, Loaded | None], None]
AttemptCallback = Callable[[UnloadAttempt], None]
BusyPredicate = Callable[[str], Busy | None]


class EmulatorError(RuntimeError):
    """The emulator hit errors it could not handle; raised by ``stop``."""


@dataclass
class _Worker:
    """A worker Pod in flight: it runs at ``due``; ``cause`` says why an unloader exists."""

    pod: nmc_rules.WorkerPod
    cause: Cause | None
    due: float


@dataclass
class _Nmc:
    """One node's NodeModulesConfig (by module name; one namespace per emulator), its worker
    Pods, its in-use marks (N9), and why each removed spec entry went (for the record)."""

    spec: dict[str, SpecEntry] = field(default_factory=dict)
    status: dict[str, StatusEntry] = field(default_factory=dict)
    in_use: set[str] = field(default_factory=set)
    workers: dict[str, _Worker] = field(default_factory=dict)
    removal_causes: dict[str, Cause] = field(default_factory=dict)

    def snapshot(self) -> tuple[Any, ...]:
        return (
            tuple(sorted(self.spec.items())),
            tuple(sorted(self.status.items())),
            tuple(sorted(self.in_use)),
            tuple(sorted((m, w.pod) for m, w in self.workers.items())),
        )


class KmmEmulator:
    """Plays KMM for the Modules of ``namespace``. Use as a context manager, or start/stop."""

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        *,
        default_delay_seconds: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core: Any = k8s.CoreV1Api(api_client)
        self._custom: Any = k8s.CustomObjectsApi(api_client)
        self.namespace = namespace
        self._default_delay = default_delay_seconds
        self._clock = clock
        self._wakeup = threading.Condition(threading.RLock())
        self._dirty = True
        self._stopped = False
        self._delays: dict[str, float] = {}
        self._failing: set[str] = set()
        self._busy: dict[str, Busy] = {}
        self._busy_predicates: list[BusyPredicate] = []
        self._live: dict[str, set[str]] = {}
        self._nmcs: dict[str, _Nmc] = {}
        self._record = UnloadRecord()
        self._errors: list[BaseException] = []
        self.unreachable_retries = 0
        self._change_callbacks: list[ChangeCallback] = []
        self._attempt_callbacks: list[AttemptCallback] = []
        self._reconciler = threading.Thread(target=self._run, name="kmm-emulator", daemon=True)
        self._node_cache = NodeCache(self._core, self.wake)
        self._watches: list[NodeCache | WatchWakeup] = [
            WatchWakeup("modules", self._watch_modules, self.wake),
            self._node_cache,
        ]
        # Label writes to different Nodes go out together, as KMM's controllers (several
        # workers each) write them; one Node's writes stay in the pass's order.
        self._writers = ThreadPoolExecutor(LABEL_WRITERS, thread_name_prefix="kmm-labels")

    # --- test controls -------------------------------------------------------------------

    def delay_node(self, node: str, seconds: float) -> None:
        """Every worker created later on ``node`` runs ``seconds`` after its creation."""
        with self._wakeup:
            self._delays[node] = seconds
        self.wake()

    def fail_node(self, node: str, failing: bool = True) -> None:
        """Loader Pods on ``node`` fail (and retry) while ``failing``; unloaders still work."""
        with self._wakeup:
            if failing:
                self._failing.add(node)
            else:
                self._failing.discard(node)
                now = self._clock()
                for worker in self._nmcs.get(node, _Nmc()).workers.values():
                    if worker.pod.action is nmc_rules.WorkerAction.LOAD:
                        worker.due = min(worker.due, now)
        self.wake()

    def set_busy(self, node: str, reason: str, *, held: bool = False) -> None:
        """``node``'s devices are in use; ``held``: its modules' refcount is held (EBUSY)."""
        with self._wakeup:
            self._busy[node] = Busy(reason, held)
        self.wake()

    def clear_busy(self, node: str) -> None:
        with self._wakeup:
            self._busy.pop(node, None)
        self.wake()

    def busy_when(self, predicate: BusyPredicate) -> None:
        """Also ask ``predicate(node)`` (a Busy or None) at each unload attempt (from the
        emulator's thread, while it holds its lock: keep it quick, do not call back)."""
        with self._wakeup:
            self._busy_predicates.append(predicate)

    def set_live_modules(self, node: str, modules: Iterable[str]) -> None:
        """The kernel modules live on ``node``'s host (for instance an in-tree ``xe``)."""
        with self._wakeup:
            self._live[node] = set(modules)
        self.wake()

    def live_modules(self, node: str) -> frozenset[str]:
        with self._wakeup:
            return frozenset(self._live.get(node, ()))

    def on_change(self, callback: ChangeCallback) -> None:
        """Call ``callback(module, node, loaded)`` after every completed load or unloader."""
        with self._wakeup:
            self._change_callbacks.append(callback)

    def on_unload_attempt(self, callback: AttemptCallback) -> None:
        """Call ``callback(attempt)`` after every unload attempt (in-tree removals too)."""
        with self._wakeup:
            self._attempt_callbacks.append(callback)

    def unload_attempts(self) -> list[UnloadAttempt]:
        """Every unload attempt so far, in order."""
        return self._record.attempts()

    def unloads_while_busy(self) -> list[UnloadAttempt]:
        """The attempts made while their node was busy (whatever their outcome)."""
        return self._record.while_busy()

    def assert_no_unload_while_busy(self) -> None:
        self._record.assert_none_while_busy()

    def loaded(self, module: str, node: str) -> Loaded | None:
        """What KMM reports loaded of ``module`` on ``node`` (its NMC status entry)."""
        status = self.status_entry(module, node)
        return None if status is None else Loaded(status.version, status.config.container_image)

    def status_entry(self, module: str, node: str) -> StatusEntry | None:
        with self._wakeup:
            return self._nmcs.get(node, _Nmc()).status.get(module)

    def spec_entry(self, module: str, node: str) -> SpecEntry | None:
        with self._wakeup:
            return self._nmcs.get(node, _Nmc()).spec.get(module)

    def worker_action(self, module: str, node: str) -> str | None:
        """ "Load" or "Unload" while a worker Pod for ``module`` exists on ``node``."""
        with self._wakeup:
            worker = self._nmcs.get(node, _Nmc()).workers.get(module)
            return None if worker is None else str(worker.pod.action)

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        for watch in self._watches:
            watch.start()
        self._reconciler.start()

    def stop(self, timeout_seconds: float = 10.0) -> None:
        """Stops the threads, then lets go of its Modules (removes its finalizer from them)."""
        with self._wakeup:
            self._stopped = True
            self._wakeup.notify_all()
        for watch in self._watches:
            watch.stop(timeout_seconds)
        self._reconciler.join(timeout_seconds)
        self._writers.shutdown(wait=True)
        self._release_finalizers()
        if self._errors:
            raise EmulatorError(f"KMM emulator errors: {self._errors!r}")

    def take_errors(self) -> list[BaseException]:
        """The passes that failed so far (each retried), forgotten by `stop`: chaos tests
        break the API server under it on purpose and count these instead."""
        with self._wakeup:
            errors, self._errors = list(self._errors), []
        return errors

    def __enter__(self) -> KmmEmulator:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def wake(self) -> None:
        with self._wakeup:
            self._dirty = True
            self._wakeup.notify_all()

    # --- API access ----------------------------------------------------------------------

    def _watch_modules(self) -> Any:
        return self._custom.list_namespaced_custom_object(
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            watch=True,
            timeout_seconds=300,
            _preload_content=False,
        )

    def _list_modules(self) -> list[dict[str, Any]]:
        response = self._custom.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, _preload_content=False
        )
        items: list[dict[str, Any]] = json.loads(response.data)["items"]
        return items

    @contextmanager
    def _tolerating_gone(self) -> Iterator[None]:
        """An object deleted meanwhile (404) or changed meanwhile (409) is retried later."""
        try:
            yield
        except k8s.ApiException as error:
            if error.status not in (HTTP_NOT_FOUND, HTTP_CONFLICT):
                raise
            self.wake()

    def _patch_module(self, name: str, body: dict[str, Any]) -> None:
        with self._tolerating_gone():
            self._custom.patch_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name, body
            )

    def _set_finalizers(self, module: Mapping[str, Any], finalizers: list[str]) -> None:
        self._patch_module(
            module["metadata"]["name"],
            {
                "metadata": {
                    "finalizers": finalizers or None,
                    "resourceVersion": module["metadata"]["resourceVersion"],
                }
            },
        )

    def _patch_node_labels(
        self, node: NodeView, changes: Mapping[str, str | None]
    ) -> NodeView | None:
        """Applies the label changes that change something; the node as it now is."""
        effective = {k: v for k, v in changes.items() if node.labels.get(k) != v}
        if not effective:
            return node
        with self._tolerating_gone():
            response = self._core.patch_node(
                node.name, {"metadata": {"labels": effective}}, _preload_content=False
            )
            return self._node_cache.record(json.loads(response.data))
        return None

    def _patch_nodes_labels(
        self, changes: Mapping[str, tuple[NodeView, Mapping[str, str | None]]]
    ) -> dict[str, NodeView | None]:
        """`_patch_node_labels` for many Nodes at once; each Node as it now is."""
        names = sorted(name for name, (_, change) in changes.items() if change)
        patched = self._writers.map(lambda name: self._patch_node_labels(*changes[name]), names)
        return dict(zip(names, patched, strict=True))

    def _release_finalizers(self) -> None:
        try:
            modules = self._list_modules()
        except k8s.ApiException as error:
            if error.status == HTTP_NOT_FOUND:
                return
            raise
        for module in modules:
            finalizers = module["metadata"].get("finalizers") or []
            if FINALIZER in finalizers:
                self._set_finalizers(module, [f for f in finalizers if f != FINALIZER])

    # --- the loop ------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._wakeup:
                while not self._dirty and not self._stopped:
                    self._wakeup.wait(self._seconds_to_next_due())
                    if self._next_due_passed():
                        break
                if self._stopped:
                    return
                self._dirty = False
            try:
                self._reconcile_all()
            except Exception as error:
                with self._wakeup:
                    if self._stopped:
                        return
                    if _api_server_unreachable(error):
                        # KMM's controllers (controller-runtime) retry with backoff while the
                        # API server restarts; only other errors are the emulator's bugs.
                        self.unreachable_retries += 1
                    else:
                        self._errors.append(error)
                time.sleep(ERROR_RETRY_SECONDS)
                self.wake()

    def _all_workers(self) -> list[_Worker]:
        return [w for nmc in self._nmcs.values() for w in nmc.workers.values()]

    def _seconds_to_next_due(self) -> float:
        workers = self._all_workers()
        if not workers:
            return RESYNC_SECONDS
        next_due = min(worker.due for worker in workers)
        return max(0.0, min(RESYNC_SECONDS, next_due - self._clock()))

    def _next_due_passed(self) -> bool:
        now = self._clock()
        return any(worker.due <= now for worker in self._all_workers())

    def _nmc(self, node: str) -> _Nmc:
        return self._nmcs.setdefault(node, _Nmc())

    def _snapshot(self) -> tuple[Any, ...]:
        with self._wakeup:
            return tuple(sorted((node, nmc.snapshot()) for node, nmc in self._nmcs.items()))

    def _reconcile_all(self) -> None:
        modules = self._list_modules()
        if not self._node_cache.wait_synced(0):
            return  # the cache wakes the loop once it has listed
        nodes = self._node_cache.nodes()
        before = self._snapshot()
        with self._wakeup:
            self._forget_gone_nodes(set(nodes))
            self._sync_workers(nodes)
        nodes = self._step_version_labels(nodes)
        for module in modules:
            self._reconcile_module(module, nodes)
        ready_labels = {
            name: (nodes[name], self._reconcile_nmc(nodes[name]))
            for name in sorted(self._nmcs)
            if name in nodes
        }
        self._patch_nodes_labels(ready_labels)
        if self._snapshot() != before:
            self.wake()

    def _forget_gone_nodes(self, present: set[str]) -> None:
        """A Node's NMC is owned by it: deleting the Node garbage-collects both."""
        for table in (self._nmcs, self._live):
            for name in [name for name in table if name not in present]:
                del table[name]

    # --- workers (SyncStatus, N6; worker.go) ---------------------------------------------

    def _busy_of(self, node: str) -> Busy | None:
        busy = self._busy.get(node)
        for predicate in self._busy_predicates:
            if busy is not None:
                break
            busy = predicate(node)
        return busy

    def _sync_workers(self, nodes: Mapping[str, NodeView]) -> None:
        now = self._clock()
        for name, nmc in self._nmcs.items():
            for module, worker in list(nmc.workers.items()):
                if worker.due <= now:
                    self._run_worker(nodes[name], nmc, module, worker, now)

    def _run_worker(
        self, node: NodeView, nmc: _Nmc, module: str, worker: _Worker, now: float
    ) -> None:
        """One run of the worker container; a Succeeded Pod updates the status and goes (N6),
        a failed one restarts (P3)."""
        busy = self._busy_of(node.name)
        held = busy is not None and busy.held
        live = self._live.setdefault(node.name, set())
        config = worker.pod.built_from.config
        loading = worker.pod.action is nmc_rules.WorkerAction.LOAD
        if loading:
            run = worker_rules.run_loader(config, live, held, fails=node.name in self._failing)
        else:
            run = worker_rules.run_unloader(config, live, held)
        if run.unload or not loading:
            attempt = UnloadAttempt(
                node=node.name,
                module=module,
                cause=Cause.IN_TREE_REMOVAL if loading else worker.cause or Cause.UNKNOWN,
                kernel_modules=run.unload,
                at=now,
                busy=busy,
                succeeded=run.succeeded,
                attempt=worker.pod.restarts + 1,
            )
            self._record.add(attempt)
            for attempt_callback in self._attempt_callbacks:
                attempt_callback(attempt)
        if not run.succeeded:
            pod = nmc_rules.WorkerPod(
                worker.pod.action, worker.pod.built_from, worker.pod.restarts + 1
            )
            nmc.workers[module] = _Worker(pod, worker.cause, now + RESTART_SECONDS)
            return
        live.difference_update(run.removed)
        live.update(run.loaded)
        del nmc.workers[module]
        loaded: Loaded | None = None
        if loading:
            assert isinstance(worker.pod.built_from, SpecEntry)
            status = nmc_rules.status_after_load(worker.pod.built_from, node.boot_id)
            nmc.status[module] = status
            loaded = Loaded(status.version, status.config.container_image)
        else:
            nmc.status.pop(module, None)
        for callback in self._change_callbacks:
            callback(module, node.name, loaded)

    # --- version labels (V1, V2) ---------------------------------------------------------

    def _step_version_labels(self, nodes: dict[str, NodeView]) -> dict[str, NodeView]:
        changes = {
            name: (node, versions.label_changes(node.labels, self.namespace))
            for name, node in nodes.items()
        }
        patched = self._patch_nodes_labels(changes)
        return {**nodes, **{name: node for name, node in patched.items() if node is not None}}

    # --- the Module reconciler (module_reconciler.go) ------------------------------------

    def _reconcile_module(self, module: dict[str, Any], nodes: Mapping[str, NodeView]) -> None:
        view = ModuleView.from_object(module)
        finalizers: list[str] = module["metadata"].get("finalizers") or []
        if view.deleting:
            self._finalize_module(module, view, finalizers)
            return
        if FINALIZER not in finalizers:
            self._set_finalizers(module, [*finalizers, FINALIZER])
        if not view.has_module_loader:
            return  # M9: v2.6.0 stops here (main also clears status.moduleLoader)
        with self._wakeup:
            configured = {n for n, nmc in self._nmcs.items() if view.name in nmc.spec}
            decisions = scheduling.schedule(view, list(nodes.values()), configured)
            for node, decision in decisions.items():
                self._apply_scheduling(view.name, node, decision)
            entries = [
                (nmc.spec[view.name], nmc.status.get(view.name))
                for nmc in self._nmcs.values()
                if view.name in nmc.spec
            ]
        targeted = sum(1 for node in nodes.values() if scheduling.is_targeted(view, node))
        wanted = scheduling.loader_status(targeted, entries)
        current = (module.get("status") or {}).get("moduleLoader") or {}
        if current != wanted:
            keys = ("nodesMatchingSelectorNumber", "desiredNumber", "availableNumber")
            with self._tolerating_gone():
                self._custom.patch_namespaced_custom_object_status(
                    GROUP,
                    VERSION,
                    self.namespace,
                    PLURAL,
                    view.name,
                    {"status": {"moduleLoader": {key: wanted.get(key) for key in keys}}},
                )

    def _apply_scheduling(self, module: str, node: str, decision: scheduling.Scheduling) -> None:
        """M6 add (spec entry + configured/in-use marks) or M5 delete (spec entry only)."""
        nmc = self._nmc(node)
        if decision.action is scheduling.Action.ADD and decision.entry is not None:
            nmc.spec[module] = decision.entry
            nmc.in_use.add(module)
            nmc.removal_causes.pop(module, None)
        elif decision.action is scheduling.Action.DELETE and module in nmc.spec:
            del nmc.spec[module]
            nmc.removal_causes[module] = decision.cause or Cause.UNKNOWN

    def _finalize_module(
        self, module: dict[str, Any], view: ModuleView, finalizers: list[str]
    ) -> None:
        """M7 (module_reconciler.go :: Reconcile → finalizeModule): as soon as the Module has a
        deletionTimestamp, its spec entries are removed from every NMC at once, and each NMC's
        orphan status gets an unloader (nmc_reconciler.go, N4): every node the Module loaded is
        unloaded at once, busy or not. KMM's own finalizer only waits for that; no finalizer
        can stop it, which is why gpuctl refuses the DELETE (coordinator/module_guard.py).
        The finalizer goes once no NMC has the module in use (its status gone, so its
        unloaders are done)."""
        with self._wakeup:
            for nmc in self._nmcs.values():
                if view.name in nmc.spec:
                    del nmc.spec[view.name]
                    nmc.removal_causes[view.name] = Cause.MODULE_DELETED
            in_use = any(view.name in nmc.in_use for nmc in self._nmcs.values())
        if not in_use and FINALIZER in finalizers:
            self._set_finalizers(module, [f for f in finalizers if f != FINALIZER])

    # --- the NMC reconciler (nmc_reconciler.go :: Reconcile) -----------------------------

    def _reconcile_nmc(self, node: NodeView) -> dict[str, str | None]:
        """One NMC's workers and in-use marks; the label changes it asks of its Node."""
        with self._wakeup:
            nmc = self._nmcs[node.name]
            for module in list(nmc.workers):
                if nmc_rules.is_orphan_worker(nmc.spec.get(module), nmc.status.get(module)):
                    del nmc.workers[module]  # N6 (SyncStatus, Running orphan), N8
            skipped, changes = self._process_entries(node, nmc)
            if not skipped:  # N5: an unschedulable entry ends the pass after its labels go
                nmc.in_use = {m for m in nmc.in_use if m in nmc.spec or m in nmc.status}  # N9
                changes = self._ready_label_changes(node, nmc)
        return changes

    def _process_entries(self, node: NodeView, nmc: _Nmc) -> tuple[bool, dict[str, str | None]]:
        """Steps 4-5 of Reconcile: each spec entry (N5, N1-N3), then each orphan status (N4).
        Returns whether an entry was skipped as unschedulable, and the labels N5 removes."""
        skipped = False
        removals: dict[str, str | None] = {}
        orphans = dict(nmc.status)
        for module, spec in list(nmc.spec.items()):
            status = orphans.pop(module, None)
            if not scheduling.is_schedulable(node.taints, spec.tolerations):
                skipped = True
                removals.update(
                    nmc_rules.unschedulable_label_removals(node.labels, self.namespace, module)
                )
                continue
            worker = nmc.workers.get(module)
            step = nmc_rules.process_module_spec(
                spec,
                status,
                None if worker is None else worker.pod,
                status is not None and nmc_rules.rebooted(node, status),
            )
            self._apply_step(node, nmc, module, step, Cause.CONFIG_CHANGE)
        for module, status in orphans.items():
            worker = nmc.workers.get(module)
            step = nmc_rules.process_orphan_status(
                status, None if worker is None else worker.pod, nmc_rules.rebooted(node, status)
            )
            self._apply_step(node, nmc, module, step, nmc.removal_causes.get(module, Cause.UNKNOWN))
        return skipped, removals

    def _apply_step(
        self, node: NodeView, nmc: _Nmc, module: str, step: nmc_rules.Step, cause: Cause
    ) -> None:
        """Carries out an N1-N4 step; ``cause``: why an unloader created now unloads."""
        due = self._clock() + self._delays.get(node.name, self._default_delay)
        if step is nmc_rules.Step.CREATE_LOADER:
            pod = nmc_rules.WorkerPod(nmc_rules.WorkerAction.LOAD, nmc.spec[module])
            nmc.workers[module] = _Worker(pod, None, due)
        elif step is nmc_rules.Step.CREATE_UNLOADER:
            pod = nmc_rules.WorkerPod(nmc_rules.WorkerAction.UNLOAD, nmc.status[module])
            nmc.workers[module] = _Worker(pod, cause, due)
        elif step is nmc_rules.Step.DELETE_WORKER:
            del nmc.workers[module]
        elif step is nmc_rules.Step.DROP_STATUS:
            del nmc.status[module]

    def _ready_label_changes(self, node: NodeView, nmc: _Nmc) -> dict[str, str | None]:
        """N7 for every module of this namespace the NMC or the node's labels name."""
        modules = set(nmc.spec) | set(nmc.status)
        modules |= nmc_rules.ready_label_modules(node.labels, self.namespace)
        changes: dict[str, str | None] = {}
        for module in sorted(modules):
            changes.update(
                nmc_rules.ready_label_changes(
                    node.labels,
                    self.namespace,
                    module,
                    nmc.spec.get(module),
                    nmc.status.get(module),
                )
            )
        return changes


def _api_server_unreachable(error: BaseException) -> bool:
    """A connection the API server refused or dropped, or its 5xx answer: it is restarting."""
    if isinstance(error, k8s.ApiException):
        return (error.status or 0) >= 500
    return isinstance(error, urllib3.exceptions.HTTPError)
