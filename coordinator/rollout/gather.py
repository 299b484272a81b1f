"""The rollout's reads: one pass's facts from the watch caches, fresh pod lists, the agents'
call table, the Prometheus gate and the certSecrets the spec names (signing_certificates.py),
made into the decision's input by gpuctl/rollout/input/build.py.

Nodes, claims, Modules and Pods come from the coordinator's watch caches (claims with why
they cannot be trusted, when they cannot), with our own last node writes laid over them
(overlay.py). A node about to be handed to KMM (Preparing) has its pods listed afresh
instead, as has any node while the Pod watch cannot be trusted. The Prometheus gate is asked
while a node may still start; an answer is kept for GATE_RECHECK_SECONDS for the status, and
a start asks afresh (`ask_gate`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, Protocol

from coordinator.kube.client import KubeApi, KubeError, path
from coordinator.rollout.agent_calls import CallTable
from coordinator.rollout.config import RolloutConfig
from coordinator.rollout.live_reports import LiveReports
from coordinator.rollout.overlay import NodeOverlay
from coordinator.rollout.prometheus_query import query_prometheus
from coordinator.rollout.signing_certificates import SigningCertificates
from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.common.nodes import node_labels, node_name
from gpuctl.gpudriver.module_spec import module_name
from gpuctl.gpudriver.wanted_memo import WantedMemo
from gpuctl.rollout.input.build import (
    Reads,
    pass_nodes,
    reads_watched_pods,
    rollout_input,
)
from gpuctl.rollout.input.driverless import LiveReport
from gpuctl.rollout.input.facts import NodeFacts, RolloutInput
from gpuctl.rollout.input.image_probe import PROBE_LABEL
from gpuctl.rollout.input.memo import NodeFactsMemo
from gpuctl.rollout.input.pod_facts import PodFacts, node_pod_facts
from gpuctl.rollout.input.prometheus import (
    GATE_RECHECK_SECONDS,
    GateResult,
    gate_result,
)
from gpuctl.rollout.input.settings import PrometheusGateSettings, RolloutSettings
from gpuctl.rollout.input.signing_key import cert_secrets

log = logging.getLogger(__name__)

POD_LIST_TTL_SECONDS = 1.0
# Phases whose step looks at the node's pods (Verifying: for its paused GPU daemons to come
# back, gpuctl/rollout/step/pause.py), and the one that lists them afresh: its step hands the node
# to KMM.
NEEDS_PODS = frozenset(
    {Phase.CHECKING, Phase.DRAINING, Phase.PREPARING, Phase.VERIFYING, Phase.BLOCKED}
)
LISTS_PODS = Phase.PREPARING


class WatchCaches(Protocol):
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

    def images_trouble(self) -> str:
        """Why `module_images()` cannot be trusted now ("" when it can): not listed yet, or
        their list or watch failed."""
        ...

    def kmm_boot_id(self, node: str, namespace: str, module: str) -> str | None:
        """The boot KMM's NodeModulesConfig of `node` records its loader of Module
        `namespace/module` ran in ("" none; None: the NodeModulesConfigs cannot be trusted
        now: not listed yet, or their list or watch failed)."""
        ...

    def kmm_kernel(self, node: str, namespace: str, module: str) -> str | None:
        """The kernel KMM's NodeModulesConfig of `node` configures its loader of Module
        `namespace/module` for ("" none; None: cannot be trusted now, as above)."""
        ...


class RolloutGatherer:
    """Reads one pass's facts (`gather`) and asks the Prometheus gate (`ask_gate`)."""

    def __init__(
        self,
        kube: KubeApi,
        view: WatchCaches,
        *,
        config: RolloutConfig,
        calls: CallTable,
        overlay: NodeOverlay,
        pool: ThreadPoolExecutor,
        wall_clock: Callable[[], datetime],
        monotonic: Callable[[], float],
        observing_since: Callable[[], float] | None = None,
        live_reports: LiveReports | None = None,
    ) -> None:
        self.view = view
        self._live_reports = live_reports
        self._kube = kube
        self._config = config
        self._calls = calls
        self._overlay = overlay
        self._pool = pool
        self._wall = wall_clock
        self._monotonic = monotonic
        # Since when (monotonic) the caches have been watched without a gap (None: always).
        self._observing_since = observing_since
        self._pods: dict[str, tuple[float, tuple[PodFacts, ...] | None]] = {}
        self._gate_answers: dict[tuple[str, str, str], tuple[float, GateResult]] = {}
        self._certificates = SigningCertificates(kube, monotonic)
        # Each GPUDriver's NodeFacts of its last pass (gpuctl/rollout/input/memo.py); a GPUDriver's
        # passes never run at once (the work queue hands a key to one worker at a time).
        self._memos: dict[str, NodeFactsMemo] = {}
        # Each GPUDriver's wanted answers of its last pass (wanted_memo.py).
        self._wanted: dict[str, WantedMemo] = {}

    def gather(
        self,
        driver: Mapping[str, Any],
        target: str | None,
        settings: RolloutSettings,
        previous: Mapping[str, Any],
        *,
        finishing: bool = False,
    ) -> RolloutInput:
        """The pass's facts; `finishing` (a refused rollout): only the nodes mid-step, each
        wanted as its step says (gpuctl/rollout/place/refused.py)."""
        name = str(driver["metadata"]["name"])
        namespace = self._config.namespace
        all_nodes = self._overlay.apply(self.view.nodes())
        nodes, wanted = pass_nodes(
            driver,
            all_nodes,
            target,
            finishing=finishing,
            memo=self._wanted.setdefault(name, WantedMemo()),
        )
        reads = Reads(
            driver=driver,
            target=target,
            settings=settings,
            previous=previous,
            namespace=namespace,
            nodes=nodes,
            wanted=wanted,
            claims=self.view.claims(),
            claims_trouble=self.view.claims_trouble(),
            module=self.view.module(namespace, module_name(name)),
            images_config=self.view.module_images(namespace, module_name(name)),
            images_unknown=self.view.images_trouble(),
            now=self._wall(),
            node_pods=self._pods_of(nodes),
            watched_pods={
                node_name(n): self.view.pods_on(node_name(n))
                for n in nodes
                if reads_watched_pods(n)
            },
            calls=self._calls.for_nodes(node_name(n) for n in nodes),
            observed_for=(
                math.inf
                if self._observing_since is None
                else max(0.0, self._monotonic() - self._observing_since())
            ),
            blocked_recheck_seconds=self._config.blocked_recheck_seconds,
            signing_certificates=self._certificates.read(
                namespace, cert_secrets((driver.get("spec") or {}).get("kernelModule") or {})
            ),
            kmm_boot_ids=self._kmm_records(self.view.kmm_boot_id, nodes, namespace, name),
            kmm_kernels=self._kmm_records(self.view.kmm_kernel, nodes, namespace, name),
            live_reports=self._latest_reports(nodes),
        )
        if any(reads_watched_pods(n) and reads.watched_pods[node_name(n)] is None for n in nodes):
            # The Pod watch cannot be trusted: the image probes are listed instead.
            reads = dataclasses.replace(reads, listed_probes=self._listed_probes(name, namespace))
        memo = self._memos.setdefault(name, NodeFactsMemo())
        inp = rollout_input(reads, memo)
        gate = self._gate(name, settings, inp.nodes)
        return inp if gate is None else dataclasses.replace(inp, gate=gate)

    def _latest_reports(self, nodes: Sequence[Mapping[str, Any]]) -> dict[str, LiveReport]:
        """Each node's agent's latest report where the registry holds one (live_reports.py)."""
        if self._live_reports is None:
            return {}
        out = {}
        for node in nodes:
            latest = self._live_reports.latest_report(node_name(node))
            if latest is not None:
                out[node_name(node)] = latest
        return out

    @staticmethod
    def _kmm_records(
        read: Callable[[str, str, str], str | None],
        nodes: Sequence[Mapping[str, Any]],
        namespace: str,
        driver: str,
    ) -> dict[str, str]:
        """What `read` finds in KMM's NodeModulesConfig of each node where it could be read
        (gpuctl/rollout/input/kmm_boots.py)."""
        out: dict[str, str] = {}
        for node in nodes:
            called = node_name(node)
            found = read(called, namespace, module_name(driver))
            if found is not None:
                out[called] = found
        return out

    def forget_driver(self, name: str) -> None:
        """The GPUDriver is gone: drop its passes' kept facts."""
        self._memos.pop(name, None)
        self._wanted.pop(name, None)

    def forget_pods(self, node: str) -> None:
        """The node's pods changed by our hand (an eviction): list them afresh next time."""
        self._pods.pop(node, None)

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
        return self.ask_gate(driver, gate)

    def ask_gate(self, driver: str, gate: PrometheusGateSettings) -> GateResult:
        """Asks Prometheus now; the verdict is kept for _gate."""
        asked, asked_at = self._monotonic(), self._wall()
        answer = query_prometheus(self._config.prometheus, gate.url, gate.query, gate.timeout)
        result = gate_result(
            gate.query, answer.status, answer.body, answer.error, asked_at=asked_at
        )
        if not result.passed:
            log.info("rollout gate holds", extra={"gpudriver": driver, "why": result.words})
        self._gate_answers[(driver, gate.url, gate.query)] = (asked, result)
        return result

    def _pods_of(
        self, nodes: Sequence[Mapping[str, Any]]
    ) -> dict[str, tuple[PodFacts, ...] | None]:
        """The pods of the nodes whose step looks at them: from the Pod watch, or listed (in
        parallel) before a KMM write or while the watch cannot be trusted."""
        found: dict[str, tuple[PodFacts, ...] | None] = {}
        to_list = []
        for node in nodes:
            name = node_name(node)
            phase = names.parse_phase(node_labels(node).get(names.STATE_LABEL))
            if phase not in NEEDS_PODS:
                continue
            watched = None if phase is LISTS_PODS else self.view.pods_on(name)
            if watched is None:
                to_list.append(name)
            else:
                found[name] = node_pod_facts(watched, dra_served=self.view.claims_served())
        found.update(zip(to_list, self._pool.map(self._listed_pods, to_list), strict=True))
        return found

    def _listed_probes(self, driver: str, namespace: str) -> list[dict[str, Any]] | None:
        """The GPUDriver's image probe Pods as the API server lists them (None: the list
        failed)."""
        try:
            answer = self._kube.request(
                "GET",
                path("", "v1", "pods", namespace=namespace),
                query={"labelSelector": f"{PROBE_LABEL}={driver}"},
            )
        except KubeError as err:
            log.warning("could not list the image probes", extra={"error": str(err)})
            return None
        return list(answer.get("items") or [])

    def _listed_pods(self, node: str) -> tuple[PodFacts, ...] | None:
        """The node's pods as the API server lists them (at most once a second); None when
        the list failed."""
        now = self._monotonic()
        cached = self._pods.get(node)
        if cached is not None and now - cached[0] < POD_LIST_TTL_SECONDS:
            return cached[1]
        try:
            answer = self._kube.request(
                "GET", path("", "v1", "pods"), query={"fieldSelector": f"spec.nodeName={node}"}
            )
            listed: tuple[PodFacts, ...] | None = node_pod_facts(
                answer.get("items") or [], dra_served=self.view.claims_served()
            )
        except KubeError as err:
            log.warning("could not list pods", extra={"node": node, "error": str(err)})
            listed = None
        self._pods[node] = (now, listed)
        return listed
