"""A test-side stand-in for Kernel Module Management (KMM v2), which needs real kernels.

It watches the Modules of one namespace and all Nodes, and does what KMM does that a
coordinator can observe through the API. Reproduced (facts from KMM's documentation and
sources, kubernetes-sigs/kernel-module-management: docs/mkdocs/documentation/ordered_upgrade.md,
internal/controllers/module_nmc_reconciler.go, nmc_reconciler.go,
module_version_label_action_table.go, internal/node/node.go, internal/constants/constants.go):

- Targeting: a Node is targeted when it has every ``spec.selector`` label and each of its
  NoSchedule/NoExecute taints is tolerated by ``spec.tolerations``. The module is loaded only
  where a ``kernelMappings`` entry matches the Node's ``status.nodeInfo.kernelVersion`` (a
  trailing ``+`` dropped; ``literal`` equal, or ``regexp`` found); elsewhere it is unloaded.
- Versions: a Module without ``version`` is loaded on every targeted Node. With a version,
  it is loaded where the Node's ``kmm.node.kubernetes.io/version-module.<ns>.<module>`` label
  equals it; a Node without that label gets it unloaded; a Node whose label names another
  version keeps what it runs. Changing a Node's label first unloads the old module, then loads
  the new one (KMM's internal worker label is removed, then set to the new value).
- Node labels: ``kmm.node.kubernetes.io/<ns>.<module>.ready`` (empty value) while the module is
  loaded, and ``...version.ready=<version>`` while a versioned module is loaded; both are
  removed when it is unloaded.
- ``status.moduleLoader``: ``nodesMatchingSelectorNumber`` = targeted Nodes; ``desiredNumber``
  = Nodes configured to run the module; ``availableNumber`` = those running the configured build.
- The finalizer ``kmm.node.kubernetes.io/module-finalizer``: added to every Module; a deleted
  Module is unloaded everywhere before the finalizer is removed.

Not reproduced: images, builds, signing, device plugins, worker Pods and NodeModulesConfig
objects, firmware, reboots. In a real cluster the node-lifecycle controller taints a cordoned
Node ``node.kubernetes.io/unschedulable:NoSchedule`` (which un-targets it unless tolerated);
this control plane has no such controller: ``cordon_taint.CordonTaintMirror`` (fixture
``cordon_taints``) plays that part for tests that cordon.

Tests steer it: ``delay_node`` makes every load and unload on a Node take that long;
``fail_node`` makes loads there fail (retried every second, as KMM retries a failed loader;
nothing is loaded until cleared). ``on_change(callback)`` calls
``callback(module, node, loaded)`` after each completed load (``loaded`` set) or unload
(``loaded`` None), before the node's labels say so, as a real load changes the host before
KMM reports it: tests use it to make a fake host root show the module the emulator loaded.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

from gpuctl.common import names
from tests.harness import kmm_model as model
from tests.harness.watch_wakeup import WatchWakeup

RESYNC_SECONDS = 5.0
FAILED_LOAD_RETRY_SECONDS = 1.0
ERROR_RETRY_SECONDS = 0.5
HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409


class EmulatorError(RuntimeError):
    """The emulator hit errors it could not handle; raised by ``stop``."""


@dataclass(frozen=True)
class _Operation:
    """A load (``target`` set) or unload (``target`` None) that completes at ``due``."""

    target: model.Loaded | None
    due: float


_Key = tuple[str, str]  # (module name, node name); one namespace per emulator


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
        self._api_client = api_client
        self._core: Any = k8s.CoreV1Api(api_client)
        self._custom: Any = k8s.CustomObjectsApi(api_client)
        self.namespace = namespace
        self._default_delay = default_delay_seconds
        self._clock = clock
        self._wakeup = threading.Condition()
        self._dirty = True
        self._stopped = False
        self._delays: dict[str, float] = {}
        self._failing: set[str] = set()
        self._loaded: dict[_Key, model.Loaded] = {}
        self._worker_labels: dict[_Key, str] = {}
        self._operations: dict[_Key, _Operation] = {}
        self._errors: list[BaseException] = []
        self._change_callbacks: list[Callable[[str, str, model.Loaded | None], None]] = []
        self._reconciler = threading.Thread(target=self._run, name="kmm-emulator", daemon=True)
        self._watches = [
            WatchWakeup("modules", self._watch_modules, self.wake),
            WatchWakeup("nodes", self._watch_nodes, self.wake),
        ]

    # --- test controls -------------------------------------------------------------------

    def delay_node(self, node: str, seconds: float) -> None:
        """Every later load and unload on ``node`` takes ``seconds``."""
        with self._wakeup:
            self._delays[node] = seconds
        self.wake()

    def fail_node(self, node: str, failing: bool = True) -> None:
        """Loads on ``node`` fail while ``failing`` (unloads still work)."""
        with self._wakeup:
            if failing:
                self._failing.add(node)
            else:
                self._failing.discard(node)
                now = self._clock()
                for key, operation in self._operations.items():
                    if key[1] == node:
                        self._operations[key] = _Operation(operation.target, now)
        self.wake()

    def on_change(self, callback: Callable[[str, str, model.Loaded | None], None]) -> None:
        """Call ``callback(module, node, loaded)`` after every completed load or unload."""
        with self._wakeup:
            self._change_callbacks.append(callback)

    def loaded(self, module: str, node: str) -> model.Loaded | None:
        """What the emulator has loaded of ``module`` on ``node``."""
        with self._wakeup:
            return self._loaded.get((module, node))

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
        self._release_finalizers()
        if self._errors:
            raise EmulatorError(f"KMM emulator errors: {self._errors!r}")

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
            names.KMM_GROUP,
            names.KMM_VERSION,
            self.namespace,
            names.KMM_MODULE_PLURAL,
            watch=True,
            timeout_seconds=300,
            _preload_content=False,
        )

    def _watch_nodes(self) -> Any:
        return self._core.list_node(watch=True, timeout_seconds=300, _preload_content=False)

    def _list_modules(self) -> list[dict[str, Any]]:
        response = self._custom.list_namespaced_custom_object(
            names.KMM_GROUP,
            names.KMM_VERSION,
            self.namespace,
            names.KMM_MODULE_PLURAL,
            _preload_content=False,
        )
        items: list[dict[str, Any]] = json.loads(response.data)["items"]
        return items

    def _list_nodes(self) -> list[dict[str, Any]]:
        response = self._core.list_node(_preload_content=False)
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
                names.KMM_GROUP,
                names.KMM_VERSION,
                self.namespace,
                names.KMM_MODULE_PLURAL,
                name,
                body,
            )

    def _release_finalizers(self) -> None:
        try:
            modules = self._list_modules()
        except k8s.ApiException as error:
            if error.status == HTTP_NOT_FOUND:
                return
            raise
        for module in modules:
            finalizers = module["metadata"].get("finalizers") or []
            if model.FINALIZER in finalizers:
                remaining = [f for f in finalizers if f != model.FINALIZER]
                self._patch_module(
                    module["metadata"]["name"],
                    {
                        "metadata": {
                            "finalizers": remaining or None,
                            "resourceVersion": module["metadata"]["resourceVersion"],
                        }
                    },
                )

    # --- reconciling ---------------------------------------------------------------------

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
                    self._errors.append(error)
                time.sleep(ERROR_RETRY_SECONDS)
                self.wake()

    def _seconds_to_next_due(self) -> float:
        if not self._operations:
            return RESYNC_SECONDS
        next_due = min(op.due for op in self._operations.values())
        return max(0.0, min(RESYNC_SECONDS, next_due - self._clock()))

    def _next_due_passed(self) -> bool:
        now = self._clock()
        return any(op.due <= now for op in self._operations.values())

    def _reconcile_all(self) -> None:
        modules = self._list_modules()
        nodes = [model.NodeView.from_object(node) for node in self._list_nodes()]
        present = {module["metadata"]["name"] for module in modules}
        self._forget_vanished_modules(present)
        for module in modules:
            self._reconcile_module(module, nodes)

    def _forget_vanished_modules(self, present: set[str]) -> None:
        with self._wakeup:
            for table in (self._loaded, self._worker_labels, self._operations):
                for key in [key for key in table if key[0] not in present]:
                    del table[key]

    def _reconcile_module(self, module: dict[str, Any], nodes: list[model.NodeView]) -> None:
        view = model.ModuleView.from_object(module)
        finalizers = module["metadata"].get("finalizers") or []
        if not view.deleting and model.FINALIZER not in finalizers:
            self._patch_module(
                view.name,
                {
                    "metadata": {
                        "finalizers": [*finalizers, model.FINALIZER],
                        "resourceVersion": module["metadata"]["resourceVersion"],
                    }
                },
            )
        decisions: dict[str, model.Decision] = {}
        loaded_now: dict[str, model.Loaded | None] = {}
        for node in nodes:
            decision, loaded = self._step_node(view, node)
            decisions[node.name] = decision
            loaded_now[node.name] = loaded
            self._sync_node_labels(view, node, loaded)
        status = model.loader_status(view, nodes, decisions, loaded_now).as_status()
        if (module.get("status") or {}).get("moduleLoader") != status and not view.deleting:
            with self._tolerating_gone():
                self._custom.patch_namespaced_custom_object_status(
                    names.KMM_GROUP,
                    names.KMM_VERSION,
                    self.namespace,
                    names.KMM_MODULE_PLURAL,
                    view.name,
                    {"status": {"moduleLoader": status}},
                )
        if view.deleting and not any(loaded_now.values()) and model.FINALIZER in finalizers:
            remaining = [f for f in finalizers if f != model.FINALIZER]
            self._patch_module(
                view.name,
                {
                    "metadata": {
                        "finalizers": remaining or None,
                        "resourceVersion": module["metadata"]["resourceVersion"],
                    }
                },
            )

    def _step_node(
        self, module: model.ModuleView, node: model.NodeView
    ) -> tuple[model.Decision, model.Loaded | None]:
        """Advances this module on this node by what time allows; returns decision and state."""
        key = (module.name, node.name)
        label = node.labels.get(model.version_module_label(module.namespace, module.name))
        with self._wakeup:
            while True:
                loaded = self._loaded.get(key)
                worker = model.next_worker_label(label, self._worker_labels.get(key), loaded)
                if worker is None:
                    self._worker_labels.pop(key, None)
                else:
                    self._worker_labels[key] = worker
                decision = model.decide(module, node, worker)
                if not self._advance(key, node.name, decision, loaded):
                    return decision, self._loaded.get(key)

    def _advance(
        self, key: _Key, node: str, decision: model.Decision, loaded: model.Loaded | None
    ) -> bool:
        """Schedules or completes the next load/unload; True when the state changed."""
        if decision.keep or decision.load == loaded:
            self._operations.pop(key, None)
            return False
        target = None if loaded is not None else decision.load
        operation = self._operations.get(key)
        now = self._clock()
        if operation is None or operation.target != target:
            operation = _Operation(target, now + self._delays.get(node, self._default_delay))
            self._operations[key] = operation
        if operation.due > now:
            return False
        if target is not None and node in self._failing:
            self._operations[key] = _Operation(target, now + FAILED_LOAD_RETRY_SECONDS)
            return False
        del self._operations[key]
        if target is None:
            self._loaded.pop(key, None)
        else:
            self._loaded[key] = target
        for callback in self._change_callbacks:
            callback(key[0], node, target)
        return True

    def _sync_node_labels(
        self, module: model.ModuleView, node: model.NodeView, loaded: model.Loaded | None
    ) -> None:
        wanted = model.readiness_labels(module, loaded)
        changes = {k: v for k, v in wanted.items() if node.labels.get(k) != v}
        if changes:
            with self._tolerating_gone():
                self._core.patch_node(node.name, {"metadata": {"labels": changes}})
