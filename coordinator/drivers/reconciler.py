"""Reconcile one GPUDriver: gather the inputs, carry out the plan, write status and Events.

The decisions are elsewhere and pure (plan.py, module_spec.py, driver_nodes.py, validation.py,
conflicts.py, known_issues.py, status.py); this module only reads (the GPUDriver and its
Module fresh from the API server, the other GPUDrivers and the Nodes from the watch caches)
and writes (finalizer, TARGET_LABEL on Nodes, Module, status, Events). A plan is made on the
Node cache; when it would write anything that can make KMM unload a node or let the Module go
(NEEDS_FRESH_NODES), the Nodes that matter are read again from the API server
(label-selected, so few) and the plan is made again on them: fresh truth for those writes,
and a failed read holds them. It returns when to look again, if the watches alone would not
say so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from coordinator.drivers.kmm_check import KmmSupportCheck
from coordinator.kube.client import MERGE_PATCH, KubeApi, KubeError, path
from coordinator.kube.discovery import Discovery
from coordinator.kube.events import EventRecorder
from coordinator.kube.paged_list import list_pages
from gpuctl.common import names
from gpuctl.common.names import FINALIZER, TARGET_LABEL
from gpuctl.gpudriver.conflicts import conflicting_driver
from gpuctl.gpudriver.driver_nodes import DriverNodes, NodeRef, driver_nodes, planned_part
from gpuctl.gpudriver.known_issues import KnownIssue, known_issues, new_warnings
from gpuctl.gpudriver.module_spec import (
    desired_module,
    module_name,
    ready_label,
    version_label,
)
from gpuctl.gpudriver.plan import DriverAction, DriverPlan, DriverPlanInput, plan
from gpuctl.gpudriver.status import (
    ROLLOUT_OWNED_STATUS,
    Observation,
    Problem,
    compute_status,
    status_changed,
)
from gpuctl.gpudriver.validation import validate
from gpuctl.gpudriver.wanted_memo import WantedMemo
from gpuctl.rollout.event_notes import WARNING

log = logging.getLogger(__name__)

API_ERROR_RETRY_SECONDS = 5.0
CONFLICT_RETRY_SECONDS = 0.1
NODES = path("", "v1", "nodes")


class ClusterView(Protocol):
    """The watch caches the reconciler reads."""

    def drivers(self) -> list[dict[str, Any]]: ...

    def nodes(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class ReconcilerConfig:
    namespace: str
    loader_service_account: str | None = None


@dataclass(frozen=True)
class NodeLabels:
    """The Node labels one GPUDriver's plan reads: its TARGET_LABEL value and its Module's
    KMM ready and version labels."""

    driver: str
    ready: str
    version: str

    def selectors(self) -> tuple[str, ...]:
        """Label selectors that together list every Node the plan looks at."""
        return (f"{TARGET_LABEL}={self.driver}", self.ready, self.version)

    def facts(self, nodes: Iterable[Mapping[str, Any]]) -> DriverNodes:
        return driver_nodes(nodes, self.driver, self.ready, self.version)


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
        kmm_support: KmmSupportCheck,
        view: ClusterView,
        events: EventRecorder,
        config: ReconcilerConfig,
        now: Callable[[], str],
    ) -> None:
        self._kube = kube
        self._discovery = discovery
        self._kmm_support = kmm_support
        self._view = view
        self._events = events
        self._config = config
        self._now = now
        # Each GPUDriver's wanted answers of its last reconcile (wanted_memo.py).
        self._wanted: dict[str, WantedMemo] = {}

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

    def _fresh_facts(self, labels: NodeLabels) -> tuple[DriverNodes | None, str]:
        """The Nodes that matter, read now from the API server (in pages, keeping only what
        the plan reads of each); None and why if a read fails."""
        nodes: list[dict[str, Any]] = []
        try:
            for selector in labels.selectors():
                items, _ = list_pages(
                    self._kube, NODES, {"labelSelector": selector}, keep=planned_part
                )
                nodes.extend(items)
        except KubeError as err:
            log.warning("cannot read nodes", extra={"gpudriver": labels.driver, "error": str(err)})
            return None, err.message
        return labels.facts(nodes), ""

    def _plan(
        self, inputs: DriverPlanInput, labels: NodeLabels
    ) -> tuple[DriverPlanInput, DriverPlan]:
        """The plan on the Node cache, made again on fresh Nodes if it would release anything."""
        decided = plan(inputs)
        if decided.needs_fresh_nodes:
            facts, error = self._fresh_facts(labels)
            inputs = replace(inputs, nodes=facts, nodes_error=error)
            decided = plan(inputs)
        return inputs, decided

    def reconcile(self, name: str) -> float | None:
        """One pass; seconds until the next wanted pass, or None."""
        driver = self._get_or_none(_driver_path(name))
        if driver is None:
            self._wanted.pop(name, None)
            return None
        kmm_installed = self._discovery.kmm_installed()
        mod_name = module_name(name)
        module = self._get_or_none(self._module_path(mod_name)) if kmm_installed else None
        namespace = self._config.namespace
        labels = NodeLabels(
            name, ready_label(namespace, mod_name), version_label(namespace, mod_name)
        )
        inputs, decided = self._plan(
            DriverPlanInput(
                driver=driver,
                module_name=mod_name,
                module=module,
                desired=desired_module(driver, namespace, self._config.loader_service_account),
                kmm_installed=kmm_installed,
                kmm_unsupported=(self._kmm_support.problem() or "") if kmm_installed else "",
                nodes=labels.facts(self._view.nodes()),
                invalid=validate(driver, namespace),
                conflict_with=conflicting_driver(driver, self._view.drivers()),
            ),
            labels,
        )
        issues = self._known_issues(driver, inputs)
        problems = list(decided.problems)
        requeue = decided.requeue_after
        after: dict[str, Any] | None = driver
        try:
            after, module = self._carry_out(decided, driver, module, inputs)
            # Recorded once the writes are done, so an Event never claims a failed action.
            for note in decided.events:
                self._events.record(driver, note.kind, note.reason, note.message)
            for issue in new_warnings(issues, driver.get("status") or {}):
                self._events.record(driver, WARNING, issue.reason, issue.message)
        except KubeError as err:
            if err.conflict or err.not_found:
                # Someone (KMM, an admin, the rollout) changed or removed the object since we
                # read it.
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
            namespace=namespace,
            module_name=mod_name,
            wants_module=inputs.desired is not None,
            kmm_installed=kmm_installed,
            module=module,
            problems=tuple(problems),
            nodes_left=decided.nodes_left,
            warnings=tuple(Problem(i.reason, i.message) for i in issues),
        )
        self._write_status(after, compute_status(observation, self._now()))
        return requeue

    def _known_issues(
        self, driver: Mapping[str, Any], inputs: DriverPlanInput
    ) -> tuple[KnownIssue, ...]:
        """The reference's known issues on the nodes a live GPUDriver targets (Node cache)."""
        if inputs.desired is None or driver["metadata"].get("deletionTimestamp"):
            return ()
        spec, nodes = driver.get("spec") or {}, self._view.nodes()
        memo = self._wanted.setdefault(str(driver["metadata"]["name"]), WantedMemo())
        return known_issues(spec, nodes, memo.wanted(spec, nodes))

    def _carry_out(
        self,
        decided: DriverPlan,
        driver: dict[str, Any],
        module: dict[str, Any] | None,
        inputs: DriverPlanInput,
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Make the plan's writes, in its order; the GPUDriver and Module as they are afterwards."""
        for action in decided.actions:
            if action is DriverAction.ADD_FINALIZER:
                driver = self._set_finalizers(driver, add=True)
            elif action is DriverAction.TARGET_NODES:
                for node in decided.target_nodes:
                    self._target_node(node, driver["metadata"]["name"])
                note = decided.targeted_event
                if note is not None:
                    self._events.record(driver, note.kind, note.reason, note.message)
            elif action is DriverAction.CREATE:
                assert inputs.desired is not None
                assert decided.module_spec is not None
                module = self._create_module({**inputs.desired, "spec": decided.module_spec})
            elif action is DriverAction.UPDATE:
                assert module is not None
                assert decided.module_spec is not None
                module = self._update_module(module, decided.module_spec, inputs.desired)
            elif action is DriverAction.DELETE:
                assert module is not None
                module = self._delete_module(module)
            elif action is DriverAction.REMOVE_FINALIZER:
                self._set_finalizers(driver, add=False)
                return None, None
        return driver, module

    def _target_node(self, node: NodeRef, driver: str) -> None:
        """TARGET_LABEL=<driver> on `node`, if it is still as the plan read it."""
        metadata: dict[str, Any] = {"labels": {TARGET_LABEL: driver}}
        if node.resource_version:
            metadata["resourceVersion"] = node.resource_version
        self._kube.request(
            "PATCH",
            path("", "v1", "nodes", name=node.name),
            body={"metadata": metadata},
            content_type=MERGE_PATCH,
        )

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
        """POST the Module; one created meanwhile answers 409, and the pass is planned again
        on it (never written over unplanned)."""
        return self._kube.request("POST", self._module_path(), body=desired)

    def _update_module(
        self,
        current: Mapping[str, Any],
        spec: Mapping[str, Any],
        desired: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        """PUT `spec` over the stored Module (its resourceVersion: a stale read fails, 409);
        with a desired Module, its labels and owner reference too."""
        meta = dict(current["metadata"])
        if desired is not None:
            meta["labels"] = {**(meta.get("labels") or {}), **desired["metadata"]["labels"]}
            owners = [
                r
                for r in meta.get("ownerReferences") or []
                if r.get("uid") != desired["metadata"]["ownerReferences"][0]["uid"]
            ]
            meta["ownerReferences"] = [*owners, *desired["metadata"]["ownerReferences"]]
        body = {**current, "metadata": meta, "spec": dict(spec)}
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
