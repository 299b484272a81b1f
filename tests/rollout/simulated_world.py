"""A small in-memory world for driving the pure rollout decision over many passes.

Nodes are plain dicts; a fake KMM follows the target and version labels as the Module (which
selects nodes by names.TARGET_LABEL) does: a node targeted at a version it does not run is
unloaded, then loaded, a tick each; a node no longer targeted is unloaded. Fake agents answer
report, prepare and restore requests from each node's simulated state. The GPUDriver's target
and the nodes it wants may change between passes. Every pass builds the facts the real
controller would gather (the wanted nodes, those targeted, those with rollout state), calls
`decide`, and applies the actions. The world records what must never happen: a KMM write or
an unload on a busy node, or a node started while the unavailability bound was reached.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.common import names
from gpuctl.common.names import IN_PROGRESS, Phase
from gpuctl.rollout.actions import (
    EvictPods,
    PatchNode,
    RequestReport,
    SendPrepare,
    SendRestore,
)
from gpuctl.rollout.decide import decide
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.input.facts import (
    INSPECT,
    PREPARE,
    RESTORE,
    BlockerFact,
    CallState,
    GpuPod,
    NodeFacts,
    PrepareFacts,
    ReportFacts,
    RestoreFacts,
    RolloutInput,
)
from gpuctl.rollout.input.records import decode_changes
from gpuctl.rollout.input.settings import RolloutSettings, max_unavailable
from tests.support.rollout_samples import (
    DRIVER,
    KMM,
    NOW,
    OLD,
    TARGET,
    loaded_labels,
    report_proto,
)

PF = "0000:03:00.0"


@dataclass
class SimNode:
    name: str
    labels: dict[str, str] = field(default_factory=lambda: loaded_labels(OLD))
    annotations: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    ready: bool = True
    loaded: str | None = OLD
    vfs: int = 0
    vfs_to_vm: bool = False
    open_fd_pid: int | None = None
    pods: list[GpuPod] = field(default_factory=list)
    agent_up: bool = True
    resource_version: int = 1

    def busy(self) -> bool:
        return bool(self.open_fd_pid or self.vfs or self.pods)

    def kmm_wants(self) -> str | None:
        """The version the Module asks KMM to run here: targeted, at its version label."""
        if self.labels.get(names.TARGET_LABEL) != DRIVER:
            return None
        return self.labels.get(KMM.version)


def module_version_of(kmm_version: str) -> str:
    """The user's version inside a KMM version (`<version>-<digest>`): the backport tag."""
    return kmm_version.rsplit("-", 1)[0]


@dataclass
class SimWorld:
    nodes: dict[str, SimNode]
    settings: RolloutSettings
    rng: random.Random
    tick: int = 0
    calls: dict[tuple[str, str], CallState] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    admin_cordoned: set[str] = field(default_factory=set)
    target: str | None = TARGET
    # The nodes the GPUDriver wants (None: all of them).
    wanted: set[str] | None = None

    # -- facts ------------------------------------------------------------------------------

    def now(self) -> Any:
        return NOW + timedelta(seconds=self.tick)

    def blockers(self, sim: SimNode) -> tuple[BlockerFact, ...]:
        blockers = []
        if sim.open_fd_pid:
            blockers.append(
                BlockerFact("OPEN_CLIENTS", f"pid {sim.open_fd_pid} (ollama) holds {PF}", PF)
            )
        if sim.vfs:
            blockers.append(BlockerFact("ACTIVE_VFS", f"{PF} has {sim.vfs} VFs enabled", PF))
        return tuple(blockers)

    def report(self, sim: SimNode) -> ReportFacts:
        vf_driver = "vfio-pci" if sim.vfs_to_vm else "xe"
        loaded = sim.loaded
        return ReportFacts(
            module_state="LIVE" if loaded else "NOT_LOADED",
            module_version="",
            srcversion=f"SRC-{loaded}" if loaded else "",
            backport_tag=f"xeb_{module_version_of(loaded)}" if loaded else "",
            drivers={PF: "xe" if loaded else ""},
            vfs={PF: sim.vfs},
            report=report_proto(self.blockers(sim), vf_driver=vf_driver, vf_count=sim.vfs),
        )

    def facts(self, sim: SimNode) -> NodeFacts:
        phase = sim.labels.get(names.STATE_LABEL, "")
        attempt = (
            f"{phase}@{sim.annotations.get(names.SINCE, '')}"
            f"@{sim.annotations.get(names.STATE_VERSION, '')}"
        )
        calls = {
            kind: state
            for (node, kind), state in self.calls.items()
            if node == sim.name and state.attempt == attempt
        }
        return NodeFacts(
            name=sim.name,
            resource_version=str(sim.resource_version),
            labels=dict(sim.labels),
            annotations=dict(sim.annotations),
            unschedulable=sim.unschedulable,
            ready=sim.ready,
            gpu_pods=tuple(sim.pods),
            claims=(),
            calls=calls,
            wanted=self.is_wanted(sim),
            # KMM has found every image of this world.
            image_state="Exists",
        )

    def is_wanted(self, sim: SimNode) -> bool:
        return self.target is not None and (self.wanted is None or sim.name in self.wanted)

    def considered(self, sim: SimNode) -> bool:
        """As the controller gathers: wanted, targeted, or with this GPUDriver's state."""
        ours = names.STATE_LABEL in sim.labels and sim.annotations.get(names.GPUDRIVER) == DRIVER
        return self.is_wanted(sim) or sim.labels.get(names.TARGET_LABEL) == DRIVER or ours

    def rollout_input(self) -> RolloutInput:
        return RolloutInput(
            driver_name=DRIVER,
            target_version=self.target,
            settings=self.settings,
            module_driver="xe",
            kmm=KMM,
            module_ready=True,
            module_wait_reason="",
            resumed_version=self.target or "",
            nodes=[self.facts(s) for s in self.nodes.values() if self.considered(s)],
            now=self.now(),
            blocked_recheck_seconds=3.0,
            module_version=module_version_of(self.target) if self.target else "",
        )

    # -- one pass ---------------------------------------------------------------------------

    def unavailable(self) -> int:
        return sum(
            1
            for s in self.nodes.values()
            if s.labels.get(names.STATE_LABEL) != Phase.SKIPPED.value
            and (
                s.labels.get(names.STATE_LABEL) in {p.value for p in IN_PROGRESS}
                or s.unschedulable
                or not s.ready
            )
        )

    def step(self) -> Decision:
        decision = decide(self.rollout_input())
        bound = max_unavailable(
            self.settings.max_unavailable,
            sum(
                1
                for s in self.nodes.values()
                if s.labels.get(names.OPT_OUT_LABEL) != "skip" and self.considered(s)
            ),
        )
        for action in decision.actions:
            self.apply(action)
        starts = [
            a for a in decision.actions if isinstance(a, PatchNode) and a.phase_to is Phase.CHECKING
        ]
        if starts and self.unavailable() > bound:
            self.violations.append(f"tick {self.tick}: started {starts} beyond {bound}")
        self.kmm()
        self.tick += 1
        return decision

    def apply(self, action: object) -> None:
        if isinstance(action, PatchNode):
            self.patch(action)
        elif isinstance(action, RequestReport):
            self.answer(action.node, INSPECT, action.attempt)
        elif isinstance(action, SendPrepare):
            self.prepare(action)
        elif isinstance(action, SendRestore):
            self.restore(action)
        elif isinstance(action, EvictPods):
            self.nodes[action.node].pods.clear()

    def patch(self, patch: PatchNode) -> None:
        sim = self.nodes[patch.node]
        if str(sim.resource_version) != patch.resource_version:
            return  # a conflict: the controller looks again
        before = sim.kmm_wants()
        for key, value in patch.labels.items():
            if value is None:
                sim.labels.pop(key, None)
            else:
                sim.labels[key] = value
        if sim.kmm_wants() != before and sim.loaded is not None and sim.busy():
            self.violations.append(f"tick {self.tick}: KMM write on busy {sim.name}")
        for key, value in patch.annotations.items():
            if value is None:
                sim.annotations.pop(key, None)
            else:
                sim.annotations[key] = value
        if patch.unschedulable is not None:
            sim.unschedulable = patch.unschedulable
        sim.resource_version += 1

    def _finish(self, node: str, kind: str, attempt: str, **answer: Any) -> None:
        now = self.now().timestamp()
        self.calls[(node, kind)] = CallState(
            kind=kind, attempt=attempt, started_at=now, finished_at=now, **answer
        )

    def answer(self, node: str, kind: str, attempt: str) -> None:
        sim = self.nodes[node]
        if not sim.agent_up:
            self._finish(node, kind, attempt, error="agent not connected")
            return
        self._finish(node, kind, attempt, report=self.report(sim))

    def prepare(self, request: SendPrepare) -> None:
        sim = self.nodes[request.node]
        if not sim.agent_up:
            self._finish(request.node, PREPARE, request.attempt, error="agent not connected")
            return
        changes: list[agent_pb.NodeChange] = []
        ready = not sim.open_fd_pid and not (sim.vfs and sim.vfs_to_vm)
        if ready and sim.vfs and request.allow_disable_vfs:
            changes.append(
                agent_pb.NodeChange(
                    disabled_vfs=agent_pb.DisabledVfs(pci_address=PF, num_vfs=sim.vfs)
                )
            )
            sim.vfs = 0
        left = self.blockers(sim)
        ready = ready and not left
        result = PrepareFacts(ready, () if ready else left, tuple(changes), "", self.report(sim))
        self._finish(request.node, PREPARE, request.attempt, prepare=result)

    def restore(self, request: SendRestore) -> None:
        sim = self.nodes[request.node]
        for change in decode_changes(request.changes_json):
            if change.WhichOneof("kind") == "disabled_vfs":
                sim.vfs = change.disabled_vfs.num_vfs
        result = RestoreFacts((), self.report(sim))
        self._finish(request.node, RESTORE, request.attempt, restore=result)

    def kmm(self) -> None:
        """KMM follows the labels: first the unload (checked for safety), next tick the
        load of the version asked for (if any)."""
        for sim in self.nodes.values():
            wants = sim.kmm_wants()
            if sim.loaded == wants:
                continue
            if sim.loaded is not None:
                if sim.busy():
                    self.violations.append(f"tick {self.tick}: unloaded busy {sim.name}")
                sim.loaded = None
                for key in (KMM.ready, KMM.version_ready):
                    sim.labels.pop(key, None)
            elif wants is not None:
                sim.loaded = wants
                sim.labels.update({KMM.ready: "", KMM.version_ready: wants})
            sim.resource_version += 1

    def restart(self) -> None:
        """The coordinator died: everything in memory is gone."""
        self.calls.clear()

    def settle(self, ticks: int) -> None:
        for _ in range(ticks):
            self.step()


def world(count: int, seed: int, **settings: Any) -> SimWorld:
    base = RolloutSettings(hold_after_first_node=False)
    return SimWorld(
        nodes={f"n{i:02}": SimNode(f"n{i:02}") for i in range(count)},
        settings=dataclasses.replace(base, **settings),
        rng=random.Random(seed),  # noqa: S311 - reproducible test worlds, not secrecy
    )
