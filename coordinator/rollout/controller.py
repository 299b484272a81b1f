"""The rollout's I/O: gather the facts, run the pure decision, carry out its actions.

One worker thread takes GPUDriver names from its own queue (filled by node, GPUDriver, Module
and claim changes, by agent answers, and by the decision's own wake-up times) and makes one
pass: nodes, claims, Modules and Pods come from the coordinator's watch caches (claims
with why they cannot be trusted, when they cannot); a node about to be handed to KMM
(Preparing) has its pods listed afresh instead, as has any node while the Pod watch cannot
be trusted; agent answers come from the CallTable. The nodes a pass considers are those the
GPUDriver wants (gpuctl.common.targeting; none while it is deleted or has no kernelModule),
those carrying names.TARGET_LABEL=<driver>, and those with its rollout state; the target is
the Module's KMM version (coordinator.drivers.module_spec.kmm_version). Writes are
merge patches carrying the resourceVersion the decision saw, so a decision made on a stale
view fails (409) instead of acting, and the pass is made again. The copy a successful patch
returns is used until the watch cache has caught up with it, so the next pass never counts
a node as it was before our own write (which could break the unavailability bound).

A pass's actions are carried out node by node in parallel (`RolloutConfig.parallel_nodes`
at once), each node's in the decision's order, its first failed write ending that node's
share. That is safe because every decision about one node rests on that node's own state
alone (its write is conditioned on its resourceVersion), and starts are counted against the
unavailable nodes as the pass's Done writes leave them: a node verified Done frees its slot
for a start in the same pass, made right after that node's Done write, by the same worker,
and only if it succeeded (PatchNode.freed_by); a start into a slot free before the pass goes
at once. Without it, a pass of 500 nodes' steps made its ~500 requests one after another.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from coordinator.drivers import model
from coordinator.drivers.conflicts import conflicting_driver
from coordinator.drivers.module_spec import kmm_version, module_name, ready_label, version_label
from coordinator.event_notes import WARNING
from coordinator.health import NO_HEARTBEAT, Heartbeat
from coordinator.kube.client import MERGE_PATCH, KubeApi, KubeError, path
from coordinator.kube.events import EventRecorder
from coordinator.kube.workqueue import WorkQueue, run_worker
from coordinator.rollout.actions import (
    Action,
    DeleteWorkerPods,
    EvictPods,
    HoldWorkers,
    NudgeKmm,
    PatchNode,
    RequestReport,
    RestoreRevision,
    SendPrepare,
    SendRestore,
)
from coordinator.rollout.agent_calls import AgentCalls, CallTable
from coordinator.rollout.decide import Decision, decide
from coordinator.rollout.facts import (
    INSPECT,
    PREPARE,
    RESTORE,
    GpuPod,
    KmmLabels,
    NodeFacts,
    RolloutInput,
    node_facts,
)
from coordinator.rollout.kmm_activity import image_state, kmm_activity, module_worker_pods
from coordinator.rollout.metrics import RolloutMetrics
from coordinator.rollout.node_step import EVICT_RETRY_SECONDS
from coordinator.rollout.pods import eviction, gpu_pods
from coordinator.rollout.prometheus_gate import (
    GATE_RECHECK_SECONDS,
    MAX_ANSWER_BYTES,
    GateResult,
    gate_result,
)
from coordinator.rollout.records import decode_changes
from coordinator.rollout.refused import (
    finishes_loaded,
    finishing_settings,
    mid_step,
    refused_status,
)
from coordinator.rollout.rollout_status import resumed_version
from coordinator.rollout.settings import (
    PrometheusGate,
    RolloutSettings,
    SettingsError,
    rollout_settings,
)
from coordinator.worker_hold_guard import held_in, hold_list
from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.common import names, revisions, timestamps
from gpuctl.common.gpu_claims import claims_on_nodes
from gpuctl.common.names import Phase
from gpuctl.common.node_selectors import node_labels, node_name
from gpuctl.common.targeting import mapping_for, node_kernel, wanted_nodes
from gpuctl.common.unload_rule import modules_unloaded_with

log = logging.getLogger(__name__)

CONFLICT_RETRY_SECONDS = 0.05
API_ERROR_RETRY_SECONDS = 5.0
POD_LIST_TTL_SECONDS = 1.0
# Phases whose step looks at the node's GPU pods, and the one that lists them afresh: its
# step hands the node to KMM.
NEEDS_PODS = frozenset({Phase.CHECKING, Phase.DRAINING, Phase.PREPARING, Phase.BLOCKED})
LISTS_PODS = Phase.PREPARING
# Phase changes worth an Event on the Node (the others are in the annotations and status).
NODE_EVENT_PHASES = frozenset(
    {Phase.CHECKING, Phase.LOADING, Phase.DONE, Phase.BLOCKED, Phase.FAILED, Phase.SKIPPED}
)
DRIVER_EVENT_PHASES = frozenset({Phase.BLOCKED, Phase.FAILED})


class RolloutView(Protocol):
    """The watch caches the rollout reads."""

    def drivers(self) -> list[dict[str, Any]]: ...

    def nodes(self) -> list[dict[str, Any]]: ...

    def claims(self) -> list[dict[str, Any]]: ...

    def claims_trouble(self) -> str:
        """Why `claims()` cannot be trusted now ("" when it can): the ResourceClaims are not
        listed yet, not served though discovery says DRA is, or their list or watch failed."""
        ...

    def claims_served(self) -> bool:
        """Whether discovery says the API server serves ResourceClaims (DRA) at all."""
        ...

    def module(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def pods_on(self, node: str) -> list[dict[str, Any]] | None:
        """The node's Pods as the Pod watch has them; None when it cannot be trusted now."""
        ...

    def module_images(self, namespace: str, name: str) -> dict[str, Any] | None:
        """KMM's ModuleImagesConfig of Module `namespace/name` (None: none, or KMM too old)."""
        ...


@dataclass(frozen=True)
class RolloutConfig:
    namespace: str
    # How often a Blocked node's agent is asked whether its blocker went away.
    blocked_recheck_seconds: float = 30.0
    # Deadlines of report and restore requests (prepare uses spec.rollout.timeouts.prepare).
    report_timeout_seconds: float = 10.0
    restore_timeout_seconds: float = 60.0
    # How many nodes' actions of one pass are carried out at once.
    parallel_nodes: int = 16
    # Hold KMM's worker off a node whose devices were opened after the check (worker_hold.py):
    # only where the chart's worker hold guard enforces it.
    hold_workers: bool = False


def _resource_version(obj: Mapping[str, Any]) -> int:
    try:
        return int(str(obj.get("metadata", {}).get("resourceVersion", "0")))
    except ValueError:
        return 0


class NodeOverlay:
    """Nodes as our own last writes returned them, until the watch cache is as new.

    resourceVersions are compared as numbers, which holds for the etcd3 storage every
    kube-apiserver uses (the API calls them opaque; this is the one place that relies on it).
    """

    def __init__(self) -> None:
        self._written: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def remember(self, node: dict[str, Any]) -> None:
        with self._lock:
            self._written[str(node["metadata"]["name"])] = node

    def apply(self, nodes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        with self._lock:
            for node in nodes:
                name = str(node["metadata"]["name"])
                written = self._written.get(name)
                if written is not None and _resource_version(written) > _resource_version(node):
                    out.append(written)
                    continue
                self._written.pop(name, None)
                out.append(node)
        return out


def _module_container(module: Mapping[str, Any] | None) -> Mapping[str, Any]:
    loader = ((module or {}).get("spec") or {}).get("moduleLoader") or {}
    return dict(loader.get("container") or {})


def _module_readiness(module: Mapping[str, Any] | None, name: str, target: str) -> str:
    """ "" when the Module exists, is not being deleted and asks for `target`; else why not."""
    if module is None:
        return f"waiting for Module {name} (KMM missing, or the Module being recreated)"
    if (module.get("metadata") or {}).get("deletionTimestamp"):
        return f"waiting for Module {name}: being deleted"
    if _module_container(module).get("version") != target:
        return f"waiting for Module {name} to ask for version {target}"
    return ""


def _considered(driver: str, nodes: Sequence[dict[str, Any]], wanted: frozenset[str]) -> list[Any]:
    """The nodes a pass looks at: wanted, targeted (TARGET_LABEL=driver), or with its state."""
    out = []
    for node in nodes:
        labels = node_labels(node)
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        ours = names.STATE_LABEL in labels and annotations.get(names.GPUDRIVER) == driver
        if node_name(node) in wanted or labels.get(names.TARGET_LABEL) == driver or ours:
            out.append(node)
    return out


def _target_images(spec: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], str]:
    """The image the spec's kernel mapping gives a node's kernel ("" for none), each distinct
    kernel looked up once per pass."""
    mappings = (spec.get("kernelModule") or {}).get("kernelMappings") or []
    images: dict[str, str] = {}

    def image(node: Mapping[str, Any]) -> str:
        kernel = node_kernel(node)
        if kernel not in images:
            mapping = mapping_for(kernel, mappings)
            images[kernel] = str((mapping or {}).get("containerImage") or "")
        return images[kernel]

    return image


def kmm_labels(namespace: str, module: str) -> KmmLabels:
    """The node labels of a Module: gpuctl's version label and KMM's two readiness labels."""
    ready = ready_label(namespace, module)
    return KmmLabels(
        version=version_label(namespace, module),
        ready=ready,
        version_ready=f"{ready.removesuffix('.ready')}.version.ready",
    )


class RolloutController:
    """Drives every managed GPUDriver's rollout; `run(stop)` in its own thread."""

    def __init__(
        self,
        kube: KubeApi,
        view: RolloutView,
        *,
        agents: AgentCalls | None,
        events: EventRecorder,
        config: RolloutConfig,
        wall_clock: Callable[[], datetime],
        monotonic: Callable[[], float] = time.monotonic,
        metrics: RolloutMetrics | None = None,
        observing_since: Callable[[], float] | None = None,
    ) -> None:
        # Since when (monotonic) the caches have been watched without a gap (None: always).
        self._observing_since = observing_since
        self._kube = kube
        self._view = view
        self._agents = agents
        self._events = events
        self._config = config
        self._wall = wall_clock
        self._monotonic = monotonic
        self._metrics = metrics
        self.queue = WorkQueue(monotonic)
        self.calls = CallTable(lambda: wall_clock().timestamp(), lambda _node: self.enqueue_all())
        self.overlay = NodeOverlay()
        self._pods: dict[str, tuple[float, tuple[GpuPod, ...] | None]] = {}
        self._evicted_at: dict[str, float] = {}
        self._gate_answers: dict[tuple[str, str, str], tuple[float, GateResult]] = {}
        # Each GPUDriver's last readable settings: a refused pass finishes its steps by them.
        self._readable_settings: dict[str, RolloutSettings] = {}
        self._pool = ThreadPoolExecutor(
            max(1, config.parallel_nodes), thread_name_prefix="rollout-node"
        )
        self.passes = 0

    # -- triggers ---------------------------------------------------------------------------

    def enqueue_all(self) -> None:
        for driver in self._view.drivers():
            self.queue.add(str(driver["metadata"]["name"]))

    def changed(self, _kind: str = "", _obj: object = None) -> None:
        """Any change that can matter (a Node, GPUDriver, Module or claim): look again."""
        self.enqueue_all()

    def run(self, stop: threading.Event, heartbeat: Heartbeat = NO_HEARTBEAT) -> None:
        self.enqueue_all()
        run_worker(
            self.queue,
            self._counted_sync,
            stop,
            error_retry_seconds=API_ERROR_RETRY_SECONDS,
            failure="rollout pass failed",
            key_name="gpudriver",
            heartbeat=heartbeat,
        )
        # Actions in flight finish or fail on their own (the LeaderFence refuses writes once
        # leadership is gone); stopping does not wait for a request to an unreachable server.
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _counted_sync(self, name: str) -> float | None:
        try:
            return self.sync(name)
        finally:
            self.passes += 1

    # -- one pass ---------------------------------------------------------------------------

    def _driver(self, name: str) -> dict[str, Any] | None:
        for driver in self._view.drivers():
            if driver["metadata"]["name"] == name:
                return driver
        return None

    def sync(self, name: str) -> float | None:
        """One pass for one GPUDriver; seconds until it wants another, or None."""
        driver = self._driver(name)
        if driver is None:
            return None
        deleting = bool((driver.get("metadata") or {}).get("deletionTimestamp"))
        spec = driver.get("spec") or {}
        previous = dict((driver.get("status") or {}).get("rollout") or {})
        # Nothing is loaded any more once the GPUDriver is deleted or has no kernelModule:
        # the nodes still targeted are unloaded, one checked node at a time.
        target = kmm_version(spec) if spec.get("kernelModule") and not deleting else None
        rival = None if deleting else conflicting_driver(driver, self._view.drivers())
        refusal = ""
        if rival is not None:
            # Its nodes are the older GPUDriver's to roll; starting one would fight it.
            refusal = f"no rollout: GPUDriver {rival} already loads the driver on these nodes"
        try:
            settings = rollout_settings(spec)
        except SettingsError as err:
            last = self._readable_settings.get(name)
            return self._finish_refused(driver, target, previous, refusal or str(err), last)
        self._readable_settings[name] = settings
        if refusal:
            return self._finish_refused(driver, target, previous, refusal, settings)
        inp = self._gather(driver, spec, target, settings, previous)
        decision = decide(inp)
        if decision.ask_gate and settings.prometheus_gate is not None:
            # A node would start on an answer older than the gate allows: ask now, decide again.
            fresh = self._ask_gate(name, settings.prometheus_gate)
            inp = dataclasses.replace(inp, gate=fresh)
            decision = decide(inp)
        requeue = self._execute(driver, inp, decision)
        if decision.rollback is not None and requeue is None:
            # Before the status write: the spec patch carries the resourceVersion read.
            requeue = self._roll_back(driver, decision.rollback)
        written: dict[str, Any] = {}
        if decision.status != (previous or None):
            written["rollout"] = decision.status
        if decision.revisions is not None:
            written["revisions"] = decision.revisions
        if written:
            self._write_status_fields(driver, written)
        for event in decision.events:
            self._events.record(driver, event.kind, event.reason, event.message)
        if self._metrics is not None:
            blocked = [n.reason_kind for n in inp.nodes if n.phase is Phase.BLOCKED]
            counts = decision.status["counts"] if decision.status is not None else {}
            self._metrics.phases(name, counts, blocked)
        if requeue is not None:
            return requeue
        return decision.requeue_after

    def _finish_refused(
        self,
        driver: dict[str, Any],
        target: str | None,
        previous: Mapping[str, Any],
        why: str,
        settings: RolloutSettings | None,
    ) -> float | None:
        """A refused rollout (refused.py): Paused with why, about `target` (nothing of another
        version's status is kept); the nodes already in a step finish it at the version the
        Module asks for, and nothing starts."""
        name = str(driver["metadata"]["name"])
        module = self._view.module(self._config.namespace, module_name(name))
        asked = str(_module_container(module).get("version") or "") or None
        spec = driver.get("spec") or {}
        inp = self._gather(
            driver, spec, asked, finishing_settings(settings), previous, finishing=True
        )
        decision = decide(inp) if inp.nodes else Decision()
        requeue = self._execute(driver, inp, decision)
        status = refused_status(target, why, inp.nodes)
        if status != previous:
            if not str(previous.get("message", "")).startswith(why):
                self._events.record(driver, WARNING, "InvalidRollout", why)
            self._write_status(driver, status)
        return requeue if requeue is not None else decision.requeue_after

    def _kmm_activity(
        self, node: str, module: str, image: str, images_config: Mapping[str, Any] | None
    ) -> str:
        """What KMM's worker Pods on `node` and its ModuleImagesConfig show, in words."""
        pods = self._view.pods_on(node)
        if pods is None:
            return ""  # the Pod watch cannot be trusted now: nothing to tell
        workers = module_worker_pods(pods, self._config.namespace, module)
        return kmm_activity(workers, image=image, state_of_image=image_state(images_config, image))

    def _gather(
        self,
        driver: Mapping[str, Any],
        spec: Mapping[str, Any],
        target: str | None,
        settings: RolloutSettings,
        previous: Mapping[str, Any],
        *,
        finishing: bool = False,
    ) -> RolloutInput:
        """The pass's facts; `finishing` (a refused rollout): only the nodes mid-step, each
        wanted as its step says (refused.py)."""
        name = str(driver["metadata"]["name"])
        module = module_name(name)
        namespace = self._config.namespace
        all_nodes = self.overlay.apply(self._view.nodes())
        if finishing:
            all_nodes = [n for n in all_nodes if mid_step(n, name)]
            wanted = frozenset(node_name(n) for n in all_nodes if finishes_loaded(n))
        else:
            wanted = wanted_nodes(spec, all_nodes) if target else frozenset()
        claims = claims_on_nodes(self._view.claims(), all_nodes)
        claims_unknown = self._view.claims_trouble()
        facts = []
        target_image = _target_images(spec)
        considered = _considered(name, all_nodes, wanted)
        pods_of = self._pods_of(considered)
        images_config = self._view.module_images(namespace, module)
        for node in considered:
            called = node_name(node)
            activity = ""
            if names.parse_phase(node_labels(node).get(names.STATE_LABEL)) is Phase.LOADING:
                activity = self._kmm_activity(called, module, target_image(node), images_config)
            facts.append(
                node_facts(
                    node,
                    gpu_pods=pods_of.get(called, ()),
                    claims=claims.get(called, ()),
                    calls=self.calls.for_node(called),
                    wanted=called in wanted,
                    claims_unknown=claims_unknown,
                    target_image=target_image(node),
                    kmm_activity=activity,
                    unfinished_workers=self._unfinished_workers(node, module),
                )
            )
        kernel_module = spec.get("kernelModule") or {}
        module_object = self._view.module(namespace, module)
        modprobe = _module_container(module_object).get("modprobe") or {}
        waiting_for_module = _module_readiness(module_object, module, target) if target else ""
        module_driver = kernel_module.get("moduleName") or modprobe.get("moduleName")
        loading_order = kernel_module.get("modulesLoadingOrder") or modprobe.get(
            "modulesLoadingOrder"
        )
        return RolloutInput(
            driver_name=name,
            target_version=target,
            settings=settings,
            module_driver=str(module_driver or model.DEFAULT_MODULE_NAME),
            kmm=kmm_labels(namespace, module),
            module_ready=not waiting_for_module,
            module_wait_reason=waiting_for_module,
            resumed_version=resumed_version(driver),
            nodes=facts,
            now=self._wall(),
            observed_for=(
                math.inf
                if self._observing_since is None
                else max(0.0, self._monotonic() - self._observing_since())
            ),
            previous_status=previous,
            blocked_recheck_seconds=self._config.blocked_recheck_seconds,
            unloaded_with=tuple(modules_unloaded_with(loading_order)),
            module_version=str(kernel_module.get("version") or ""),
            revisions=revisions.of_status(driver),
            kernel_module=dict(kernel_module),
            rollback=revisions.read_rollback(driver),
            gate=self._gate(name, settings, facts),
        )

    def _unfinished_workers(self, node: Mapping[str, Any], module: str) -> tuple[str, ...]:
        """KMM's worker Pods of the Module on a node whose KMM worker is held or was let go
        (worker_hold.py) that have not succeeded nor are being deleted; () for other nodes,
        and while the Pod watch cannot be trusted."""
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        if not {names.KMM_WORKER_HELD, names.KMM_WORKER_RELEASED} & set(annotations):
            return ()
        pods = self._view.pods_on(node_name(node))
        if pods is None:
            return ()
        return tuple(
            sorted(
                str(pod["metadata"]["name"])
                for pod in module_worker_pods(pods, self._config.namespace, module)
                if (pod.get("status") or {}).get("phase") != "Succeeded"
                and not pod["metadata"].get("deletionTimestamp")
            )
        )

    def _gate(
        self, driver: str, settings: RolloutSettings, facts: Sequence[NodeFacts]
    ) -> GateResult | None:
        """The Prometheus gate's verdict while some node may still start (an answer is used
        for GATE_RECHECK_SECONDS: a start needs a younger one, decide.py asks for it); None
        without a gate or with every node settled."""
        gate = settings.prometheus_gate
        settled = (Phase.DONE, Phase.SKIPPED)
        if gate is None or all(n.phase in settled for n in facts):
            return None
        cached = self._gate_answers.get((driver, gate.url, gate.query))
        if cached is not None and self._monotonic() - cached[0] < GATE_RECHECK_SECONDS:
            return cached[1]
        return self._ask_gate(driver, gate)

    def _ask_gate(self, driver: str, gate: PrometheusGate) -> GateResult:
        """Asks Prometheus now; the verdict is kept for _gate."""
        asked, asked_at = self._monotonic(), self._wall()
        url = f"{gate.url}/api/v1/query?" + urllib.parse.urlencode({"query": gate.query})
        status: int | None = None
        body, error = b"", ""
        try:
            with urllib.request.urlopen(url, timeout=gate.timeout) as answer:  # noqa: S310
                status, body = answer.status, answer.read(MAX_ANSWER_BYTES)
        except urllib.error.HTTPError as err:
            status, body = err.code, err.read(MAX_ANSWER_BYTES)
        except (urllib.error.URLError, OSError, ValueError) as err:
            error = str(getattr(err, "reason", "") or err)
        result = gate_result(gate.query, status, body, error, asked_at=asked_at)
        if not result.passed:
            log.info("rollout gate holds", extra={"gpudriver": driver, "why": result.words})
        self._gate_answers[(driver, gate.url, gate.query)] = (asked, result)
        return result

    def _pods_of(self, nodes: Sequence[Mapping[str, Any]]) -> dict[str, tuple[GpuPod, ...] | None]:
        """The GPU pods of the nodes whose step looks at them: from the Pod watch, or listed
        (in parallel) before a KMM write or while the watch cannot be trusted."""
        found: dict[str, tuple[GpuPod, ...] | None] = {}
        to_list = []
        for node in nodes:
            name = node_name(node)
            phase = names.parse_phase(node_labels(node).get(names.STATE_LABEL))
            if phase not in NEEDS_PODS:
                continue
            watched = None if phase is LISTS_PODS else self._view.pods_on(name)
            if watched is None:
                to_list.append(name)
            else:
                found[name] = gpu_pods(watched, dra_served=self._view.claims_served())
        found.update(zip(to_list, self._pool.map(self._listed_gpu_pods, to_list), strict=True))
        return found

    def _listed_gpu_pods(self, node: str) -> tuple[GpuPod, ...] | None:
        """The node's GPU pods as the API server lists them (at most once a second); None
        when the list failed."""
        now = self._monotonic()
        cached = self._pods.get(node)
        if cached is not None and now - cached[0] < POD_LIST_TTL_SECONDS:
            return cached[1]
        try:
            answer = self._kube.request(
                "GET", path("", "v1", "pods"), query={"fieldSelector": f"spec.nodeName={node}"}
            )
            listed: tuple[GpuPod, ...] | None = gpu_pods(
                answer.get("items") or [], dra_served=self._view.claims_served()
            )
        except KubeError as err:
            log.warning("could not list pods", extra={"node": node, "error": str(err)})
            listed = None
        self._pods[node] = (now, listed)
        return listed

    # -- actions ----------------------------------------------------------------------------

    def _execute(
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
            return self._hold_workers(action)
        elif isinstance(action, DeleteWorkerPods):
            self._delete_workers(inp, action)
        elif isinstance(action, NudgeKmm):
            self._nudge_kmm(action)
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
        self.overlay.remember(written)
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
                self._metrics.transition(patch, node.since, inp.now)
            told.append((written, patch))
        return None

    def _record_events(
        self, driver: Mapping[str, Any], written: Mapping[str, Any], patch: PatchNode
    ) -> None:
        if patch.event is None:
            return
        if patch.phase_to is None or patch.phase_to in NODE_EVENT_PHASES:
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

        self.calls.start(node, kind, attempt, send)

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
        self._pods.pop(action.node, None)

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

    def _hold_workers(self, action: HoldWorkers) -> float | None:
        """Adds the node to the worker holds on the coordinator's namespace, or takes it out
        (names.KMM_WORKER_HOLDS; a merge patch conditioned on the namespace's
        resourceVersion: two passes holding two nodes never lose one). A retry soon when the
        write failed or raced."""
        if not self._config.hold_workers:
            if action.held:
                log.warning(
                    "without --kmm-worker-hold, KMM's worker is not held off the node",
                    extra={"node": action.node},
                )
            return None
        namespace_path = path("", "v1", "namespaces", name=self._config.namespace)
        try:
            namespace = self._kube.request("GET", namespace_path)
            meta = namespace.get("metadata") or {}
            held = held_in((meta.get("annotations") or {}).get(names.KMM_WORKER_HOLDS))
            wanted = held | {action.node} if action.held else held - {action.node}
            if wanted == held:
                return None
            self._kube.request(
                "PATCH",
                namespace_path,
                body={
                    "metadata": {
                        "resourceVersion": meta.get("resourceVersion"),
                        "annotations": {names.KMM_WORKER_HOLDS: hold_list(wanted) or None},
                    }
                },
                content_type=MERGE_PATCH,
            )
        except KubeError as err:
            if err.conflict:
                return CONFLICT_RETRY_SECONDS
            log.warning("could not write the worker holds", extra={"error": str(err)})
            return API_ERROR_RETRY_SECONDS
        log.info(
            "KMM's worker held off the node" if action.held else "worker hold let go",
            extra={"node": action.node},
        )
        return None

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

    def _roll_back(self, driver: Mapping[str, Any], rollback: RestoreRevision) -> float | None:
        """spec.kernelModule back to the recorded revision, with the rollback record, if the
        GPUDriver is still as read (else the next pass decides again)."""
        name = str(driver["metadata"]["name"])
        body = revisions.restore_patch(
            driver, rollback.revision, {names.ROLLBACK: rollback.note, names.RESUMED_VERSION: None}
        )
        try:
            self._kube.request(
                "PATCH",
                path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL, name=name),
                body=body,
                content_type=MERGE_PATCH,
            )
        except KubeError as err:
            if err.conflict or err.not_found:
                return CONFLICT_RETRY_SECONDS
            log.warning("rollback write failed", extra={"gpudriver": name, "error": str(err)})
            return API_ERROR_RETRY_SECONDS
        log.warning("rolled back", extra={"gpudriver": name, "to": rollback.note})
        self._events.record(
            driver, rollback.event.kind, rollback.event.reason, rollback.event.message
        )
        return None

    def _write_status(self, driver: Mapping[str, Any], status: dict[str, Any] | None) -> None:
        self._write_status_fields(driver, {"rollout": status})

    def _write_status_fields(self, driver: Mapping[str, Any], fields: dict[str, Any]) -> None:
        name = driver["metadata"]["name"]
        try:
            self._kube.request(
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
