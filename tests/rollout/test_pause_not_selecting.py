"""A declared GPU DaemonSet that does not select on gpuctl.dev/driver-ready (issue 46, item 8).

Its pod stays on the node when the label goes off: the drain waits `timeouts.drain` and the
node is Blocked. Before, it was released and started again at once, for ever: cordon, wait,
Blocked `paused-pods`, released, again. Now the first drain timeout Blocks it once
(`pause-not-selecting`), naming the DaemonSet and the lines to add to its pod template, and it
stays Blocked, uncordoned and untouched, until the DaemonSet changes (a pod of a new revision
on the node); then it goes on.

The world drives `decide` pass after pass (simulated_world.py) with a DaemonSet controller
that deletes the daemon's pod when its template selects on the label and the node loses it,
and makes one again when the node matches: its pod holds the node's render node open.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.input.facts import BlockerFact, NodeFacts, ReportFacts
from gpuctl.rollout.input.gpu_pod_watch import watched_part
from gpuctl.rollout.input.pod_facts import PodFacts, pod_facts, selects_driver_ready
from gpuctl.rollout.input.settings import PauseSettings, RolloutSettings, Timeouts
from tests.rollout.simulated_world import PF, SimNode, SimWorld
from tests.support.rollout_samples import OLD, TARGET, loaded_labels

DAEMON_SET = "monitoring/xpumanager"
PID = 4242
DRAIN = 20.0  # seconds: each tick is one


@dataclass
class DaemonSetSim:
    """A DaemonSet's template as its controller acts on it: whether it selects on the
    driver-ready label (`selects`), whether its pods show that in their own nodeSelector
    (`in_pod_spec`: a node affinity term does not show, the controller replaces a pod's
    required terms with its node's name), and its revision (controller-revision-hash)."""

    selects: bool = False
    in_pod_spec: bool = False
    revision: str = "5b8f7c9d4"
    made: int = 0


@dataclass
class DaemonNode(SimNode):
    daemon_pod: PodFacts | None = None

    def busy(self) -> bool:
        return super().busy() or self.daemon_pod is not None


def ready_labels() -> dict[str, str]:
    return {**loaded_labels(OLD), names.DRIVER_READY_LABEL: names.DRIVER_READY_VALUE}


@dataclass
class PausingWorld(SimWorld):
    daemon: DaemonSetSim = field(default_factory=DaemonSetSim)
    drainings: int = 0
    blocks: list[tuple[str, str]] = field(default_factory=list)

    def pod(self, sim: SimNode) -> PodFacts | None:
        return sim.daemon_pod if isinstance(sim, DaemonNode) else None

    def facts(self, sim: SimNode) -> NodeFacts:
        pod = self.pod(sim)
        return dataclasses.replace(super().facts(sim), pods=(pod,) if pod else ())

    def blockers(self, sim: SimNode) -> tuple[BlockerFact, ...]:
        held = BlockerFact("OPEN_CLIENTS", f"1 process holds {PF} open: pid {PID} (xpumd)", PF)
        return (*super().blockers(sim), *((held,) if self.pod(sim) else ()))

    def report(self, sim: SimNode) -> ReportFacts:
        facts = super().report(sim)
        pod = self.pod(sim)
        if pod is not None:
            device = facts.report.devices.add(pci_address=PF, driver="xe")
            device.drm.render = "renderD128"
            owner = device.clients.add(pid=PID, command="xpumd").owner
            owner.kind = owner.POD
            owner.pod_uid = pod.uid
        return facts

    def step(self) -> Decision:
        decision = super().step()
        for action in decision.actions:
            if isinstance(action, PatchNode) and action.phase_to is Phase.DRAINING:
                self.drainings += 1
            if isinstance(action, PatchNode) and action.phase_to is Phase.BLOCKED:
                kind = str(action.annotations.get(names.REASON_KIND))
                self.blocks.append((kind, str(action.annotations.get(names.REASON))))
        self.daemon_set_controller()
        return decision

    def daemon_set_controller(self) -> None:
        ds = self.daemon
        for sim in self.nodes.values():
            assert isinstance(sim, DaemonNode)
            matches = not ds.selects or names.DRIVER_READY_LABEL in sim.labels
            pod = sim.daemon_pod
            if pod is not None and (not matches or self.revision(pod) != ds.revision):
                sim.daemon_pod = pod = None  # deleted (its process ends first)
            if pod is None and matches:
                ds.made += 1
                sim.daemon_pod = self.new_pod(sim.name, ds)

    @staticmethod
    def revision(pod: PodFacts) -> str:
        return dict(pod.labels).get("controller-revision-hash", "")

    @staticmethod
    def new_pod(node: str, ds: DaemonSetSim) -> PodFacts:
        spec: dict[str, Any] = {"selects_driver_ready": True} if ds.in_pod_spec else {}
        return PodFacts(
            "monitoring",
            f"xpumanager-{ds.made:05}",
            f"uid-{node}-{ds.made}",
            owner_kind="DaemonSet",
            owner_name="xpumanager",
            labels=(("app", "xpumanager"), ("controller-revision-hash", ds.revision)),
            ready=True,
            **spec,
        )

    def phase(self, name: str = "n1") -> str:
        return self.nodes[name].labels.get(names.STATE_LABEL, "")


def pausing_world(daemon: DaemonSetSim) -> PausingWorld:
    settings = RolloutSettings(
        hold_after_first_node=False,
        pause=PauseSettings(daemon_sets=frozenset({DAEMON_SET})),
        timeouts=dataclasses.replace(Timeouts(), drain=DRAIN),
    )
    world = PausingWorld(
        nodes={"n1": DaemonNode("n1", labels=ready_labels())},
        settings=settings,
        rng=random.Random(1),  # noqa: S311 - reproducible test worlds, not secrecy
        daemon=daemon,
    )
    world.daemon_set_controller()
    return world


def test_a_declared_daemon_that_does_not_select_on_the_label_is_blocked_once_not_cycled() -> None:
    """Ten drain timeouts' worth of passes: the node drains once, is Blocked once with the
    DaemonSet and the lines that fix it, released (uncordoned, label back), and stays so."""
    world = pausing_world(DaemonSetSim(selects=False))
    world.settle(int(DRAIN * 10))
    assert world.drainings == 1, world.blocks
    assert world.phase() == Phase.BLOCKED.value
    [(kind, reason)] = world.blocks
    assert kind == "pause-not-selecting"
    assert f"DaemonSet {DAEMON_SET}" in reason
    assert 'nodeSelector: {gpuctl.dev/driver-ready: "true"}' in reason
    sim = world.nodes["n1"]
    assert not sim.unschedulable
    assert sim.labels[names.DRIVER_READY_LABEL] == "true"
    assert sim.loaded == OLD
    assert world.violations == []


def test_once_the_daemon_set_selects_on_the_label_the_blocked_node_goes_on() -> None:
    """The admin adds the node affinity term: the DaemonSet's new revision replaces its pod
    (whose spec does not show the term), the node is started again, the pause takes the pod
    off, KMM loads the target and the daemon comes back."""
    world = pausing_world(DaemonSetSim(selects=False))
    world.settle(int(DRAIN * 3))
    assert world.phase() == Phase.BLOCKED.value
    world.daemon.selects, world.daemon.revision = True, "6c9d8e0f5"
    world.settle(int(DRAIN * 3))
    assert world.phase() == Phase.DONE.value, world.blocks
    assert world.nodes["n1"].loaded == TARGET
    assert world.pod(world.nodes["n1"]) is not None
    assert world.drainings == 2
    assert names.PAUSE_NOT_SELECTING not in world.nodes["n1"].annotations
    assert world.violations == []


def test_a_daemon_set_selecting_through_node_affinity_is_paused_as_before() -> None:
    """Its pods' specs do not show the term, but the controller deletes them: no block."""
    world = pausing_world(DaemonSetSim(selects=True))
    world.settle(int(DRAIN * 3))
    assert world.phase() == Phase.DONE.value, world.blocks
    assert world.blocks == []
    assert world.drainings == 1
    assert world.violations == []


def test_pods_whose_spec_selects_but_stay_are_paused_pods_tried_again_as_before() -> None:
    """The pod's own nodeSelector asks for the label, yet it is not deleted (the DaemonSet
    controller is down, say): nothing says the DaemonSet is wrong, so `paused-pods`, released
    and tried again once its blocker seems gone."""
    world = pausing_world(DaemonSetSim(selects=False, in_pod_spec=True))
    world.settle(int(DRAIN * 4))
    assert world.drainings > 1
    assert {kind for kind, _ in world.blocks} == {"paused-pods"}
    assert names.PAUSE_NOT_SELECTING not in world.nodes["n1"].annotations


def test_a_pod_of_the_same_revision_made_again_keeps_the_node_blocked() -> None:
    """Evicted or deleted by hand, the DaemonSet makes the same pod again: the DaemonSet has
    not changed, the node stays Blocked (its words name the new pod)."""
    world = pausing_world(DaemonSetSim(selects=False))
    world.settle(int(DRAIN * 3))
    sim = world.nodes["n1"]
    assert isinstance(sim, DaemonNode)
    world.daemon.made += 1
    sim.daemon_pod = world.new_pod("n1", world.daemon)
    world.settle(int(DRAIN * 3))
    assert world.phase() == Phase.BLOCKED.value
    assert world.drainings == 1
    assert [kind for kind, _ in world.blocks] == ["pause-not-selecting"] * 2
    assert "monitoring/xpumanager-00002 (DaemonSet monitoring/xpumanager)" in world.blocks[-1][1]


def _pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "monitoring", "name": "xpumanager-7x2kq", "uid": "u"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}], **spec},
        "status": {"phase": "Running"},
    }


def _required(*terms: dict[str, Any]) -> dict[str, Any]:
    selector = {"nodeSelectorTerms": list(terms)}
    return {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": selector}}
    }


def _expressions(*expressions: dict[str, Any]) -> dict[str, Any]:
    return {"matchExpressions": list(expressions)}


READY_IN = {"key": names.DRIVER_READY_LABEL, "operator": "In", "values": ["true"]}
OTHER = {"key": "gpu.intel.com/present", "operator": "Exists"}
# What the DaemonSet controller leaves of a template's required terms on each of its pods.
ITS_NODE = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}


def test_a_pod_spec_selects_on_the_label_by_its_node_selector_or_every_required_term() -> None:
    shown = {
        "nodeSelector": _pod({"nodeSelector": {names.DRIVER_READY_LABEL: "true", "a": "b"}}),
        "every term": _pod(_required(_expressions(READY_IN, OTHER), _expressions(READY_IN))),
        "exists": _pod(
            _required(_expressions({"key": names.DRIVER_READY_LABEL, "operator": "Exists"}))
        ),
    }
    not_shown = {
        "nothing": _pod({}),
        "another label": _pod({"nodeSelector": {"a": "b"}}),
        "one term without": _pod(_required(_expressions(READY_IN), _expressions(OTHER))),
        "NotIn": _pod(_required(_expressions({**READY_IN, "operator": "NotIn"}))),
        "a DaemonSet's pod": _pod(_required(ITS_NODE)),
    }
    for what, pod in shown.items():
        assert selects_driver_ready(pod["spec"]), what
        # The watch keeps what tells it, and nothing more of the spec's node rules.
        kept = watched_part(pod)
        assert pod_facts(kept) == pod_facts(pod), what
        assert "a" not in kept["spec"].get("nodeSelector", {})
        assert OTHER["key"] not in str(kept["spec"])
    for what, pod in not_shown.items():
        assert not selects_driver_ready(pod["spec"]), what
        assert not pod_facts(watched_part(pod)).selects_driver_ready, what
