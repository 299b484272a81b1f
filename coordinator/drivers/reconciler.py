"""Reconcile one GPUDriver: gather the inputs, carry out the plan, write status and Events.

The decisions are elsewhere and pure (plan.py, module_spec.py, validation.py, conflicts.py,
guard.py, status.py); this module only reads (the GPUDriver and its Module fresh from the
API server, nodes and claims from the watch caches) and writes (finalizer, Module, status,
Events). It returns when to look again, if the watches alone would not say so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from coordinator.drivers.conflicts import conflicting_driver
from coordinator.drivers.guard import (
    BlockerSource,
    ResourceClaimSource,
    UnloadDecision,
    decide_unload,
)
from coordinator.drivers.module_spec import desired_module, module_name
from coordinator.drivers.plan import Action, Plan, PlanInput, plan
from coordinator.drivers.status import (
    ROLLOUT_OWNED_STATUS,
    Observation,
    Problem,
    compute_status,
    status_changed,
)
from coordinator.drivers.validation import validate
from coordinator.event_notes import WARNING
from coordinator.kube.client import MERGE_PATCH, KubeApi, KubeError, path
from coordinator.kube.discovery import Discovery
from coordinator.kube.events import EventRecorder
from gpuctl.common import names
from gpuctl.common.names import FINALIZER
from gpuctl.common.node_selectors import nodes_matching
from gpuctl.common.unload_rule import modules_unloaded_with

log = logging.getLogger(__name__)

API_ERROR_RETRY_SECONDS = 5.0
CONFLICT_RETRY_SECONDS = 0.1


class ClusterView(Protocol):
    """The watch caches the reconciler reads."""

    def drivers(self) -> list[dict[str, Any]]: ...

    def nodes(self) -> list[dict[str, Any]]: ...

    def claims(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class ReconcilerConfig:
    namespace: str
    loader_service_account: str | None = None


def unloaded_with_module(module: Mapping[str, Any] | None) -> list[str]:
    """The modules KMM unloads before the Module's own: its modulesLoadingOrder after the
    first entry (the GPUDriver's, copied into the Module), [] when unset."""
    spec = (module or {}).get("spec") or {}
    modprobe = ((spec.get("moduleLoader") or {}).get("container") or {}).get("modprobe") or {}
    return modules_unloaded_with(modprobe.get("modulesLoadingOrder"))


def _driver_path(name: str | None = None, subresource: str | None = None) -> str:
    return path(
        names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL, name=name, subresource=subresource
    )


class Reconciler:
    """Brings one GPUDriver's Module, finalizer and status in line with its spec."""

    def __init__(
        self,
        kube: KubeApi,
        *,
        discovery: Discovery,
        view: ClusterView,
        events: EventRecorder,
        config: ReconcilerConfig,
        now: Callable[[], str],
        extra_blocker_sources: Sequence[BlockerSource] = (),
    ) -> None:
        self._kube = kube
        self._discovery = discovery
        self._view = view
        self._events = events
        self._config = config
        self._now = now
        self._extra_sources = tuple(extra_blocker_sources)

    def _module_path(self, name: str | None = None) -> str:
        return path(
            names.KMM_GROUP,
            names.KMM_VERSION,
            names.KMM_MODULE_PLURAL,
            namespace=self._config.namespace,
            name=name,
        )

    def _get_or_none(self, resource_path: str) -> dict[str, Any] | None:
        try:
            return self._kube.request("GET", resource_path)
        except KubeError as err:
            if err.not_found:
                return None
            raise

    def reconcile(self, name: str) -> float | None:
        """One pass; seconds until the next wanted pass, or None."""
        driver = self._get_or_none(_driver_path(name))
        if driver is None:
            return None
        kmm_installed = self._discovery.kmm_installed()
        mod_name = module_name(name)
        module = self._get_or_none(self._module_path(mod_name)) if kmm_installed else None
        inputs = PlanInput(
            driver=driver,
            module_name=mod_name,
            module=module,
            desired=desired_module(
                driver, self._config.namespace, self._config.loader_service_account
            ),
            kmm_installed=kmm_installed,
            invalid=validate(driver, self._config.namespace),
            conflict_with=conflicting_driver(driver, self._view.drivers()),
            unload=self._unload_decision(module),
        )
        decided = plan(inputs)
        problems = list(decided.problems)
        requeue = decided.requeue_after
        after: dict[str, Any] | None = driver
        try:
            after, module = self._carry_out(decided, driver, module, inputs)
            # Recorded once the writes are done, so an Event never claims a failed action.
            for note in decided.events:
                self._events.record(driver, note.kind, note.reason, note.message)
        except KubeError as err:
            if err.conflict or err.not_found:
                # Someone (KMM, an admin) changed or removed the object since we read it.
                log.info("write conflict, retrying", extra={"gpudriver": name})
                return CONFLICT_RETRY_SECONDS
            message = f"API request failed: {err.message}"
            log.warning("reconcile write failed", extra={"gpudriver": name, "error": str(err)})
            self._events.record(driver, WARNING, "ApiError", message)
            problems.append(Problem("ApiError", message))
            requeue = API_ERROR_RETRY_SECONDS
        if after is None:
            return None
        observation = Observation(
            driver=after,
            namespace=self._config.namespace,
            module_name=mod_name,
            wants_module=inputs.desired is not None,
            kmm_installed=kmm_installed,
            module=module,
            problems=tuple(problems),
        )
        self._write_status(after, compute_status(observation, self._now()))
        return requeue

    def _unload_decision(self, module: Mapping[str, Any] | None) -> UnloadDecision:
        """The guard's answer for unloading `module` from the nodes its selector targets."""
        nodes = self._view.nodes()
        selector = (module or {}).get("spec", {}).get("selector") or {}
        targets = nodes_matching(selector, nodes) if module is not None else set()
        sources: list[BlockerSource] = [
            ResourceClaimSource(tuple(self._view.claims()), tuple(nodes)),
            *self._extra_sources,
        ]
        return decide_unload(targets, sources, unloaded_with_module(module))

    def _carry_out(
        self,
        decided: Plan,
        driver: dict[str, Any],
        module: dict[str, Any] | None,
        inputs: PlanInput,
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Make the plan's writes; the GPUDriver and Module as they are afterwards."""
        for action in decided.actions:
            if action is Action.ADD_FINALIZER:
                driver = self._set_finalizers(driver, add=True)
            elif action is Action.REMOVE_FINALIZER:
                self._set_finalizers(driver, add=False)
                return None, None
            elif action is Action.CREATE:
                assert inputs.desired is not None
                module = self._create_module(dict(inputs.desired))
            elif action is Action.UPDATE:
                assert inputs.desired is not None
                assert module is not None
                module = self._update_module(module, inputs.desired)
            elif action is Action.DELETE:
                assert module is not None
                module = self._delete_module(module)
        return driver, module

    def _set_finalizers(self, driver: dict[str, Any], *, add: bool) -> dict[str, Any]:
        meta = driver["metadata"]
        finalizers = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        if add:
            finalizers.append(FINALIZER)
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
        return self._kube.request(
            "PATCH", _driver_path(meta["name"]), body=patch, content_type=MERGE_PATCH
        )

    def _create_module(self, desired: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._kube.request("POST", self._module_path(), body=desired)
        except KubeError as err:
            if not err.conflict:
                raise
            current = self._kube.request("GET", self._module_path(desired["metadata"]["name"]))
            return self._update_module(current, desired)

    def _update_module(
        self, current: Mapping[str, Any], desired: Mapping[str, Any]
    ) -> dict[str, Any]:
        meta = dict(current["metadata"])
        meta["labels"] = {**(meta.get("labels") or {}), **desired["metadata"]["labels"]}
        owners = [
            r
            for r in meta.get("ownerReferences") or []
            if r.get("uid") != desired["metadata"]["ownerReferences"][0]["uid"]
        ]
        meta["ownerReferences"] = [*owners, *desired["metadata"]["ownerReferences"]]
        body = {**current, "metadata": meta, "spec": desired["spec"]}
        return self._kube.request("PUT", self._module_path(meta["name"]), body=body)

    def _delete_module(self, module: Mapping[str, Any]) -> dict[str, Any] | None:
        meta = module["metadata"]
        body = {"preconditions": {"uid": meta["uid"]}, "propagationPolicy": "Background"}
        try:
            answer = self._kube.request("DELETE", self._module_path(meta["name"]), body=body)
        except KubeError as err:
            if err.not_found:
                return None
            raise
        # The API server answers with the object while finalizers hold it, else a Status.
        if answer.get("kind") == "Module" and answer.get("metadata", {}).get("deletionTimestamp"):
            return answer
        return None

    def _write_status(self, driver: Mapping[str, Any], status: dict[str, Any]) -> None:
        current = driver.get("status") or {}
        if not status_changed(current, status):
            return
        patch_body: dict[str, Any] = dict(status)
        for key in current:
            if key not in ROLLOUT_OWNED_STATUS:  # written by the rollout engine, not here
                patch_body.setdefault(key, None)
        try:
            self._kube.request(
                "PATCH",
                _driver_path(driver["metadata"]["name"], "status"),
                body={"status": patch_body},
                content_type=MERGE_PATCH,
            )
        except KubeError as err:
            if not err.not_found:
                raise
