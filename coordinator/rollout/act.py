"""The rollout's writes: what a decision asks for, carried out.

A pass's actions are carried out node by node in parallel (`RolloutConfig.parallel_nodes` at
once), each node's in the decision's order, its first failed write ending that node's share.
That is safe because every decision about one node rests on that node's own state alone (its
write is conditioned on its resourceVersion), and starts are counted against the unavailable
nodes as the pass's Done writes leave them: a node verified Done frees its slot for a start
in the same pass, made right after that node's Done write, by the same worker, and only if it
succeeded (PatchNode.freed_by); a start into a slot free before the pass goes at once.
Without it, a pass of 500 nodes' steps made its ~500 requests one after another. Writes are
merge patches carrying the resourceVersion the decision saw, so a decision made on a stale
view fails (409) instead of acting, and the pass is made again; the copy a successful node
patch returns is remembered (overlay.py).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from coordinator.kube.client import MERGE_PATCH, KubeApi, KubeError, path
from coordinator.kube.events import EventRecorder
from coordinator.rollout.agent_calls import AgentCalls, CallTable
from coordinator.rollout.config import RolloutConfig
from coordinator.rollout.metrics import RolloutMetrics
from coordinator.rollout.overlay import NodeOverlay
from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.common import names, timestamps
from gpuctl.common.names import Phase
from gpuctl.gpudriver import revisions
from gpuctl.gpudriver.gitops import gitops_owner
from gpuctl.gpudriver.module_spec import module_name
from gpuctl.rollout.actions import (
    Action,
    DeleteImageProbe,
    DeleteWorkerPods,
    EvictPods,
    HoldWorkers,
    NudgeKmm,
    PatchNode,
    ProbeImage,
    RequestReport,
    RestoreRevision,
    SendPrepare,
    SendRestore,
)
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.event_notes import WARNING
from gpuctl.rollout.fleet.pass_holds import rollback_in_git_words
from gpuctl.rollout.input.facts import INSPECT, PREPARE, RESTORE, NodeFacts, RolloutInput
from gpuctl.rollout.input.gpu_pod_watch import eviction
from gpuctl.rollout.input.image_probe import probe_pod
from gpuctl.rollout.input.records import decode_changes
from gpuctl.rollout.step.writes import EVICT_RETRY_SECONDS

log = logging.getLogger(__name__)

CONFLICT_RETRY_SECONDS = 0.05
API_ERROR_RETRY_SECONDS = 5.0
# Phase changes worth an Event on the Node (the others are in the annotations and status).
NODE_EVENT_PHASES = frozenset(
    {Phase.CHECKING, Phase.LOADING, Phase.DONE, Phase.BLOCKED, Phase.FAILED, Phase.SKIPPED}
)
DRIVER_EVENT_PHASES = frozenset({Phase.BLOCKED, Phase.FAILED})


class RolloutActor:
    """Carries out decisions (`execute`), rollbacks (`roll_back`) and status writes."""

    def __init__(
        self,
        kube: KubeApi,
        *,
        agents: AgentCalls | None,
        events: EventRecorder,
        config: RolloutConfig,
        calls: CallTable,
        overlay: NodeOverlay,
        pool: ThreadPoolExecutor,
        forget_pods: Callable[[str], None],
        wall_clock: Callable[[], datetime],
        monotonic: Callable[[], float] = time.monotonic,
        metrics: RolloutMetrics | None = None,
    ) -> None:
        self._kube = kube
        self._agents = agents
        self._events = events
        self._config = config
        self._calls = calls
        self._overlay = overlay
        self._pool = pool
        self._forget_pods = forget_pods
        self._wall = wall_clock
        self._monotonic = monotonic
        self._metrics = metrics
        self._evicted_at: dict[str, float] = {}

    def execute(
        self, driver: Mapping[str, Any], inp: RolloutInput, decision: Decision
    ) -> float | None:
        """Carry out the actions, node by node in parallel, each node's in order; a failed
        write ends its node's share. A start into the slot a Done write of this pass frees
        (PatchNode.freed_by) follows that write in its node's share, so it is made only if
        the write succeeded. Returns the soonest retry any node asked for."""
        shares: dict[str, list[Action]] = {}
        for action in decision.actions:
            if not (isinstance(action, PatchNode) and action.freed_by):
                shares.setdefault(action.node, []).append(action)
        for action in decision.actions:
            # A start is never made without the Done write it counts on, nor beside other
            # actions of its own node (they would race): then a later pass starts it.
            if (
                isinstance(action, PatchNode)
                and action.freed_by in shares
                and action.node not in shares
            ):
                shares[action.freed_by].append(action)
        return min(self._carry_out_shares(driver, inp, shares).values(), default=None)

    def _carry_out_shares(
        self, driver: Mapping[str, Any], inp: RolloutInput, shares: Mapping[str, list[Action]]
    ) -> dict[str, float]:
        """Each share's actions in order, shares in parallel; share -> retry for the shares
        a failed write ended."""
        by_name = {n.name: n for n in inp.nodes}

        def carry_out_share(actions: list[Action]) -> float | None:
            # The share's Events are recorded after its writes: a start that follows a Done
            # write does not wait for the Done's Events.
            told: list[tuple[Mapping[str, Any], PatchNode]] = []
            try:
                for action in actions:
                    retry = self._carry_out(driver, inp, by_name, action, told)
                    if retry is not None:
                        return retry
                return None
            finally:
                for written, patch in told:
                    self._record_events(driver, written, patch)

        if len(shares) <= 1:
            retries = [carry_out_share(a) for a in shares.values()]
        else:
            retries = list(self._pool.map(carry_out_share, shares.values()))
        return {
            name: retry for name, retry in zip(shares, retries, strict=True) if retry is not None
        }

    def _carry_out(
        self,
        driver: Mapping[str, Any],
        inp: RolloutInput,
        by_name: Mapping[str, NodeFacts],
        action: Action,
        told: list[tuple[Mapping[str, Any], PatchNode]],
    ) -> float | None:
        """One action; a node write made appends what its Events need to `told`."""
        if isinstance(action, PatchNode):
            return self._patch(inp, by_name[action.node], action, told)
        if isinstance(action, RequestReport):
            self._send(action.node, INSPECT, action.attempt, inp)
        elif isinstance(action, SendPrepare):
            self._send(action.node, PREPARE, action.attempt, inp, action)
        elif isinstance(action, SendRestore):
            self._send(action.node, RESTORE, action.attempt, inp, action)
        elif isinstance(action, EvictPods):
            self._evict(action)
        elif isinstance(action, HoldWorkers):
            # The hold list is written once a pass, after the node writes, from the Nodes'
            # names.KMM_WORKER_HELD (worker_holds.py): a HoldWorkers says what it will be.
            return None
        elif isinstance(action, DeleteWorkerPods):
            self._delete_workers(inp, action)
        elif isinstance(action, NudgeKmm):
            self._nudge_kmm(action)
        elif isinstance(action, ProbeImage):
            self._probe_image(inp, action)
        elif isinstance(action, DeleteImageProbe):
            self._delete_probe(action)
        return None

    def _patch(
        self,
        inp: RolloutInput,
        node: NodeFacts,
        patch: PatchNode,
        told: list[tuple[Mapping[str, Any], PatchNode]],
    ) -> float | None:
        metadata: dict[str, Any] = {"resourceVersion": patch.resource_version}
        if patch.labels:
            metadata["labels"] = dict(patch.labels)
        if patch.annotations:
            metadata["annotations"] = dict(patch.annotations)
        body: dict[str, Any] = {"metadata": metadata}
        if patch.unschedulable is not None:
            body["spec"] = {"unschedulable": patch.unschedulable}
        try:
            written = self._kube.request(
                "PATCH",
                path("", "v1", "nodes", name=patch.node),
                body=body,
                content_type=MERGE_PATCH,
            )
        except KubeError as err:
            if err.conflict:
                return CONFLICT_RETRY_SECONDS
            if err.not_found:
                return CONFLICT_RETRY_SECONDS
            log.warning("node write failed", extra={"node": patch.node, "error": str(err)})
            return API_ERROR_RETRY_SECONDS
        self._overlay.remember(written)
        if patch.phase_to is None and patch.phase_from is not None:
            log.info(
                "rollout left",
                extra={"node": patch.node, "from": patch.phase_from.value},
            )
            told.append((written, patch))
        if patch.phase_to is not None:
            log.info(
                "rollout step",
                extra={
                    "node": patch.node,
                    "from": patch.phase_from.value if patch.phase_from else "",
                    "to": patch.phase_to.value,
                    "reason": (patch.annotations or {}).get(names.REASON, ""),
                },
            )
            if self._metrics is not None:
                self._metrics.transition(patch, patch.phase_since or node.since, inp.now)
            told.append((written, patch))
        return None

    def _record_events(
        self, driver: Mapping[str, Any], written: Mapping[str, Any], patch: PatchNode
    ) -> None:
        if patch.event is None:
            return
        warns = patch.event.kind == WARNING  # a rebooted node's verification, say
        if patch.phase_to is None or patch.phase_to in NODE_EVENT_PHASES or warns:
            meta = written.get("metadata") or {}
            node_ref = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": meta.get("name"), "uid": meta.get("uid", "")},
            }
            self._events.record(node_ref, patch.event.kind, patch.event.reason, patch.event.message)
        if patch.phase_to is not None and patch.phase_to in DRIVER_EVENT_PHASES:
            self._events.record(
                driver,
                patch.event.kind,
                f"Node{patch.phase_to.value}",
                f"node {patch.node}: {patch.event.message}",
            )

    def _send(
        self,
        node: str,
        kind: str,
        attempt: str,
        inp: RolloutInput,
        action: SendPrepare | SendRestore | None = None,
    ) -> None:
        agents = self._agents
        request_id = f"rollout-{uuid.uuid4().hex[:12]}"

        def send() -> Any:
            if agents is None:
                raise RuntimeError("the coordinator serves no agents (no --grpc-port)")
            if isinstance(action, SendPrepare):
                request = agent_pb.PrepareRequest(
                    request_id=request_id,
                    module_name=action.module_name,
                    allow_unbind=action.allow_unbind,
                    allow_disable_vfs=action.allow_disable_vfs,
                    unloaded_with=action.unloaded_with,
                )
                return agents.request_prepare(node, request, inp.settings.timeouts.prepare)
            if isinstance(action, SendRestore):
                restore = agent_pb.RestoreRequest(
                    request_id=request_id, changes=decode_changes(action.changes_json)
                )
                return agents.request_restore(node, restore, self._config.restore_timeout_seconds)
            return agents.request_report(node, self._config.report_timeout_seconds)

        self._calls.start(node, kind, attempt, send)

    def _evict(self, action: EvictPods) -> None:
        """Asks the Eviction API for the node's GPU pods, at most once per EVICT_RETRY_SECONDS
        per node: every pass while a node drains asks for its evictions, and passes follow
        every change in the cluster, so without this a PodDisruptionBudget that says 429 for
        minutes would be asked many times a second (measured on kwok nodes: three refusals in
        175 ms), for every draining node at once."""
        now = self._monotonic()
        last = self._evicted_at.get(action.node)
        if last is not None and now - last < EVICT_RETRY_SECONDS:
            return
        self._evicted_at[action.node] = now
        for pod in action.pods:
            pod_path = path("", "v1", "pods", namespace=pod.namespace, name=pod.name)
            try:
                self._kube.request("POST", f"{pod_path}/eviction", body=eviction(pod))
                log.info("evicted GPU pod", extra={"node": action.node, "pod": str(pod)})
            except KubeError as err:
                if err.too_many_requests:
                    log.info(
                        "eviction refused by a PodDisruptionBudget; retrying",
                        extra={"node": action.node, "pod": str(pod)},
                    )
                elif not err.not_found:
                    log.warning("eviction failed", extra={"pod": str(pod), "error": str(err)})
        self._forget_pods(action.node)

    def _delete_workers(self, inp: RolloutInput, action: DeleteWorkerPods) -> None:
        """Deletes KMM's worker Pods of the Module on a held node (worker_hold.py); one
        already gone is fine. Nothing without --kmm-worker-hold: KMM would only make them
        again."""
        if not self._config.hold_workers:
            return
        module = module_name(inp.driver_name)
        by_name = {n.name: n for n in inp.nodes}
        for pod in by_name[action.node].unfinished_workers if action.node in by_name else ():
            pod_path = path("", "v1", "pods", namespace=self._config.namespace, name=pod)
            try:
                self._kube.request("DELETE", pod_path)
                log.info(
                    "deleted KMM's worker Pod on a held node",
                    extra={"node": action.node, "pod": pod, "module": module},
                )
            except KubeError as err:
                if not err.not_found:
                    log.warning(
                        "could not delete KMM's worker Pod", extra={"pod": pod, "error": str(err)}
                    )

    def _probe_image(self, inp: RolloutInput, action: ProbeImage) -> None:
        """Makes the image's probe Pod on the node (gpuctl/rollout/input/image_probe.py); one
        there already (409) is the one the next pass reads."""
        pod = probe_pod(
            driver=inp.driver_name,
            namespace=self._config.namespace,
            node=action.node,
            image=action.image,
            kernel=action.kernel,
            pull_secret=action.pull_secret,
        )
        try:
            self._kube.request(
                "POST", path("", "v1", "pods", namespace=self._config.namespace), body=pod
            )
        except KubeError as err:
            if not err.conflict:  # AlreadyExists: made by an earlier pass
                log.warning(
                    "could not make the image probe", extra={"node": action.node, "error": str(err)}
                )
            return
        log.info(
            "image probe made",
            extra={"node": action.node, "image": action.image, "kernel": action.kernel},
        )

    def _delete_probe(self, action: DeleteImageProbe) -> None:
        """Deletes a probe Pod at once (it has ended, or its answer is stale); gone is fine."""
        try:
            self._kube.request(
                "DELETE",
                path("", "v1", "pods", namespace=self._config.namespace, name=action.pod),
                body={"gracePeriodSeconds": 0},
            )
        except KubeError as err:
            if not err.not_found:
                log.warning(
                    "could not delete the image probe", extra={"pod": action.pod, "error": str(err)}
                )

    def _nudge_kmm(self, action: NudgeKmm) -> None:
        """Touches KMM's NodeModulesConfig of the node: KMM reconciles it at once."""
        config = path(
            names.KMM_GROUP, names.KMM_VERSION, names.KMM_NODE_CONFIG_PLURAL, name=action.node
        )
        now = timestamps.format_seconds(self._wall())
        try:
            self._kube.request(
                "PATCH",
                config,
                body={"metadata": {"annotations": {names.KMM_NUDGED_AT: now}}},
                content_type=MERGE_PATCH,
            )
        except KubeError as err:
            if not err.not_found:
                log.warning("could not nudge KMM", extra={"node": action.node, "error": str(err)})

    def roll_back(self, driver: Mapping[str, Any], rollback: RestoreRevision) -> float | None:
        """spec.kernelModule back to the recorded revision, with the rollback record, if the
        GPUDriver is still as read (else the next pass decides again)."""
        name = str(driver["metadata"]["name"])
        where = path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL, name=name)
        try:
            # The cache drops managedFields: read who applies the spec from the object itself.
            fresh = self._kube.request("GET", where)
            owner = gitops_owner(fresh)
            if owner:
                left = self._left_to_git(driver, fresh, rollback, owner)
                if left is None:  # changed since the decision: the next pass decides again
                    return CONFLICT_RETRY_SECONDS
                body = left
            else:
                body = revisions.restore_patch(
                    driver,
                    rollback.revision,
                    {names.ROLLBACK: rollback.note, names.RESUMED_VERSION: None},
                )
            self._kube.request("PATCH", where, body=body, content_type=MERGE_PATCH)
        except KubeError as err:
            if err.conflict or err.not_found:
                return CONFLICT_RETRY_SECONDS
            log.warning("rollback write failed", extra={"gpudriver": name, "error": str(err)})
            return API_ERROR_RETRY_SECONDS
        if owner:
            record = revisions.read_rollback({"metadata": body["metadata"]})
            words = rollback_in_git_words(record)
            log.warning("rollback left to Git", extra={"gpudriver": name, "owner": owner})
            self._events.record(driver, WARNING, "RollbackInGit", words)
            return None
        log.warning("rolled back", extra={"gpudriver": name, "to": rollback.note})
        self._events.record(
            driver, rollback.event.kind, rollback.event.reason, rollback.event.message
        )
        return None

    @staticmethod
    def _left_to_git(
        driver: Mapping[str, Any],
        fresh: Mapping[str, Any],
        rollback: RestoreRevision,
        owner: str,
    ) -> dict[str, Any] | None:
        """The rollback record alone (no spec write), on the GPUDriver as decided on; None
        when it changed since the decision read it."""
        version = str(driver["metadata"].get("resourceVersion") or "")
        if version and fresh["metadata"].get("resourceVersion") != version:
            return None
        return {
            "metadata": {
                "resourceVersion": fresh["metadata"]["resourceVersion"],
                "annotations": {
                    names.ROLLBACK: revisions.left_to_git(rollback.note, owner),
                    names.RESUMED_VERSION: None,
                },
            }
        }

    def write_status(self, driver: Mapping[str, Any], fields: dict[str, Any]) -> str | None:
        """Merges `fields` into the GPUDriver's status; the GPUDriver's resourceVersion after
        the write, or None when it failed (logged: the next pass writes again)."""
        name = driver["metadata"]["name"]
        try:
            answer = self._kube.request(
                "PATCH",
                path(
                    names.GROUP,
                    names.VERSION,
                    names.GPUDRIVER_PLURAL,
                    name=name,
                    subresource="status",
                ),
                body={"status": fields},
                content_type=MERGE_PATCH,
            )
        except KubeError as err:
            if not err.not_found:
                log.warning(
                    "rollout status write failed", extra={"gpudriver": name, "error": str(err)}
                )
            return None
        return str((answer.get("metadata") or {}).get("resourceVersion") or "") or None
