"""One chaos run: a rollout of many nodes, faults on a seeded schedule, invariants throughout.

`run_chaos(world, plan)`:
- nodes at OLD with real `gpuctl-agent` processes, some busy for good (a process holds the
  GPU: they must end Blocked with a reason), some busy until half the faults are done;
  `plan.replicas` coordinator processes kept running as a Deployment would (Replicas);
- the GPUDriver moves to a new version, and to another each time a round completes, so the
  rollout is always moving while faults land;
- faults, in a seeded random order with seeded gaps: the leading coordinator SIGKILLed (the
  standby takes the Lease over under load), every coordinator SIGKILLed, kube-apiserver
  restarted, etcd SIGKILLed and restarted, a watch expired (etcd compacted to its head, then
  the API server restarted, so resuming watches get 410), an agent's stream cut (the agent
  SIGSTOPped past its heartbeats, then continued), an agent SIGKILLed and restarted, one
  node's agent gone for good, and a replica with its wall clock skewed joining for a while
  while the leader is killed;
- invariants checked all along: a watch of the nodes checks after every event that no more
  than maxUnavailable nodes are unavailable; the kernel boundary under KMM's worker records
  every unload attempt on a busy node; at the end every node is Done at the target with a
  "verified" reason, or Blocked or Failed with a reason.

Per fault it reports the count, the invariant breaches seen while it was being injected and
recovered from, how long injecting took (a restart: until the component answered its health
check again), and the time to recover after that: until a live leader renewed the Lease
(`to_leader`; a renewal after the fault began) and until the rollout moved a node again
(`to_progress`; 0 when nothing was left to move; none within 45 s is counted as "never").
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuctl.common import names, timestamps
from testbed.chaos import etcd
from testbed.chaos.replicas import Replicas
from testbed.chaos.skewed import IDENTITY as SKEWED
from testbed.chaos.skewed import SkewedReplica
from testbed.chaos.world import ChaosWorld
from testbed.cluster_api import TEST_LABEL
from testbed.harness.waiting import retried
from testbed.rollout_live.images import OLD
from testbed.rollout_live.node_watch import Nodes, NodeWatch
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import busy_with_ollama, idle_again, old_root

KINDS = (
    "kill-leader",
    "kill-all",
    "apiserver-restart",
    "etcd-restart",
    "watch-expired",
    "agent-cut",
    "agent-restart",
    "agent-gone",
    "clock-skew",
)
RECOVERY_LIMIT_SECONDS = 45.0
SETTLE_POLL_SECONDS = 0.5


# The steps' timeouts under chaos: real KMM's chain (its worker Pods, their status through our
# kubelet, its backoff) stalls while the API server restarts or etcd is compacted, and the
# coordinator's own watch gaps are all a step's clock discounts (observed_for). Seen in CI: a
# 20 s load timeout failed three nodes whose unload Pod started 12 s late during such a fault.
# The run is about invariants, not speed; a node whose agent is gone still fails its step.
CHAOS_TIMEOUTS = {"check": "60s", "drain": "60s", "prepare": "60s", "load": "120s", "verify": "60s"}


@dataclass(frozen=True)
class ChaosPlan:
    counts: dict[str, int]
    nodes: int = 20
    busy_for_good: int = 2
    busy_for_a_while: int = 2
    max_unavailable: int = 3
    replicas: int = 2
    load_delay: float = 0.5
    gap: tuple[float, float] = (0.5, 3.0)
    skew_seconds: float = 30.0
    seed: int = 20261130


@dataclass
class FaultResult:
    kind: str
    detail: str
    injecting: float  # seconds the fault took to inject (a restart: until healthy again)
    to_leader: float | None
    to_progress: float | None
    breaches: int


@dataclass
class ChaosReport:
    faults: list[FaultResult] = field(default_factory=list)
    breaches: list[str] = field(default_factory=list)
    unloads_while_busy: list[str] = field(default_factory=list)
    unsettled: dict[str, str] = field(default_factory=dict)
    rollout_message: str = ""  # the GPUDriver's status message at the end, to explain `unsettled`
    rounds: int = 0
    relists: int = 0
    coordinator_exits: dict[int, int] = field(default_factory=dict)
    kubelet_errors: int = 0
    seconds: float = 0.0

    @property
    def violations(self) -> int:
        return len(self.breaches) + len(self.unloads_while_busy) + len(self.unsettled)

    def table(self) -> list[dict[str, Any]]:
        rows = []
        for kind in KINDS:
            results = [f for f in self.faults if f.kind == kind]
            if not results:
                continue
            leader = [f.to_leader for f in results if f.to_leader is not None]
            progress = [f.to_progress for f in results if f.to_progress is not None]
            rows.append(
                {
                    "fault": kind,
                    "count": len(results),
                    "violations": sum(f.breaches for f in results),
                    "inject_p50": _p50([f.injecting for f in results]),
                    "leader_p50": _p50(leader),
                    "leader_max": max(leader, default=None),
                    "leader_never": len(results) - len(leader),
                    "progress_p50": _p50(progress),
                    "progress_max": max(progress, default=None),
                }
            )
        return rows


def _p50(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def version_of_round(number: int) -> str:
    return f"v7.1.{number}.6_260728.7"


class _Run:
    def __init__(self, world: ChaosWorld, plan: ChaosPlan, say: Callable[[str], None]) -> None:
        self.say = say
        self.world = world
        self.rig: RolloutRig = world.rig
        self.plan = plan
        self.rng = random.Random(plan.seed)  # noqa: S311 - a reproducible schedule
        self.report = ChaosReport()
        self.nodes: list[str] = []
        self.busy_for_good: list[str] = []
        self.busy_for_a_while: list[str] = []
        self.gone: set[str] = set()
        self.target = ""
        self.round = 0
        self.replicas = Replicas(self.rig, plan.replicas)
        self.watch: NodeWatch | None = None

    # -- setup ------------------------------------------------------------------------------

    def setup(self) -> None:
        rig, plan = self.rig, self.plan
        self.nodes = [rig.add_node(f"c{i:02d}", old_root) for i in range(plan.nodes)]
        self.busy_for_good = self.nodes[: plan.busy_for_good]
        self.busy_for_a_while = self.nodes[
            plan.busy_for_good : plan.busy_for_good + plan.busy_for_a_while
        ]
        rollout = {
            "holdAfterFirstNode": False,
            "maxUnavailable": plan.max_unavailable,
            "timeouts": CHAOS_TIMEOUTS,
            # A node whose agent goes for good mid-step fails its step (that is right); the
            # budget allows those failures, so one of them does not pause the rest.
            "failureBudget": 1 + plan.counts.get("agent-gone", 0),
        }
        rig.create_driver(OLD, rollout)
        self.replicas.start()
        for node in self.nodes:
            rig.start_agent(node)
            rig.kmm.delay_node(node, plan.load_delay)
        rig.wait_phases(dict.fromkeys(self.nodes, "Done"), timeout=180)
        # Busy once loaded (a process holds the render node the loaded driver made).
        for node in self.busy_for_good + self.busy_for_a_while:
            busy_with_ollama(rig, node)
        self.watch = NodeWatch(
            rig.kube, f"{TEST_LABEL}={rig.namespace}", [self.bound], survive_outages=True
        )
        self.watch.start()
        self.say(f"{len(self.nodes)} nodes Done at {OLD}; the rollouts begin")
        self.next_round()

    def bound(self, nodes: Nodes) -> str:
        """At most maxUnavailable nodes cordoned, in a step, or at the target but not Done."""
        unavailable = set()
        for name, node in nodes.items():
            labels = (node.get("metadata") or {}).get("labels") or {}
            if (node.get("spec") or {}).get("unschedulable"):
                unavailable.add(name)
            state = labels.get(names.STATE_LABEL)
            if (
                self.target
                and labels.get(self.rig.labels.version) == self.target
                and state != "Done"
            ):
                unavailable.add(name)
            if names.parse_phase(state) in names.IN_PROGRESS:
                unavailable.add(name)
        if len(unavailable) > self.plan.max_unavailable:
            return (
                f"{len(unavailable)} nodes unavailable (maxUnavailable "
                f"{self.plan.max_unavailable}): {sorted(unavailable)}"
            )
        return ""

    def next_round(self) -> None:
        self.round += 1
        self.report.rounds = self.round
        self.say(f"round {self.round}")
        version = version_of_round(self.round)
        self.target = self.rig.kmm_version_at(version)
        self.rig.publish_everywhere(version)
        retried(lambda: self.rig.set_version(version))

    def round_done(self) -> bool:
        assert self.watch is not None
        exempt = set(self.busy_for_good) | set(self.busy_for_a_while) | self.gone
        with_states = {n: self._state(self.watch.nodes.get(n, {})) for n in self.nodes}
        return all(s == ("Done", self.target) for n, s in with_states.items() if n not in exempt)

    @staticmethod
    def _state(node: dict[str, Any]) -> tuple[str, str]:
        meta = node.get("metadata") or {}
        return (
            (meta.get("labels") or {}).get(names.STATE_LABEL, ""),
            (meta.get("annotations") or {}).get(names.STATE_VERSION, ""),
        )

    # -- faults -----------------------------------------------------------------------------

    def inject(self, kind: str) -> str:
        faults: dict[str, Callable[[], str]] = {
            "kill-leader": self.kill_leader,
            "kill-all": self.kill_all,
            "apiserver-restart": self.restart_apiserver,
            "etcd-restart": self.restart_etcd,
            "watch-expired": self.expire_watches,
            "agent-cut": lambda: self.break_agent("cut"),
            "agent-restart": lambda: self.break_agent("restart"),
            "agent-gone": lambda: self.break_agent("gone"),
            "clock-skew": self.skew_a_clock,
        }
        return faults[kind]()

    def kill_leader(self) -> str:
        leader = self.replicas.leader()
        if leader is None:
            return "no process leader at that moment: nothing killed"
        self.replicas.kill(leader)
        return f"killed {leader.identity}"

    def kill_all(self) -> str:
        for slot in self.replicas.slots:
            self.replicas.kill(slot)
        return "killed every replica"

    def restart_apiserver(self) -> str:
        self.world.plane.restart("kube-apiserver")
        return "kube-apiserver restarted"

    def restart_etcd(self) -> str:
        self.world.plane.restart("etcd", kill=True)
        return "etcd SIGKILLed and restarted"

    def expire_watches(self) -> str:
        revision = etcd.compact_to_head(self.world.plane.ports.etcd_client)
        self.world.plane.restart("kube-apiserver")
        return f"etcd compacted to {revision}, kube-apiserver restarted"

    def break_agent(self, how: str) -> str:
        node = self.rng.choice([n for n in self.nodes if n not in self.gone])
        agent = self.rig.agents[node]
        if how == "cut":
            os.kill(agent.pid, signal.SIGSTOP)
            time.sleep(self.rng.uniform(2.0, 4.0))  # past heartbeats and report freshness
            os.kill(agent.pid, signal.SIGCONT)
            return f"{node}'s agent stopped and continued"
        agent.kill()
        agent.wait()
        if how == "gone":
            self.gone.add(node)
            return f"{node}'s agent gone for good"
        self.rig.start_agent(node)
        return f"{node}'s agent killed and restarted"

    def skew_a_clock(self) -> str:
        skewed = SkewedReplica(self.rig, self.plan.skew_seconds)
        skewed.start()
        try:
            time.sleep(1.0)
            leader = self.replicas.leader()
            if leader is not None:
                self.replicas.kill(leader)
            time.sleep(self.rng.uniform(3.0, 6.0))
        finally:
            skewed.stop()
        return f"a replica with its clock +{self.plan.skew_seconds:g}s; it led: {skewed.led}"

    def leader_renewed_since(self, wall_start: float) -> bool:
        lease = self.replicas.lease()
        spec = (lease or {}).get("spec") or {}
        holder, renewed = spec.get("holderIdentity"), spec.get("renewTime")
        if not holder or not renewed or holder == SKEWED:
            return False
        alive = any(s.identity == holder and s.process for s in self.replicas.slots)
        return alive and timestamps.parse(str(renewed)).timestamp() > wall_start

    def recover(self, started: float, wall_start: float) -> tuple[float | None, float | None]:
        assert self.watch is not None
        to_leader = to_progress = None
        deadline = started + RECOVERY_LIMIT_SECONDS
        while time.monotonic() < deadline and (to_leader is None or to_progress is None):
            if to_leader is None and self.leader_renewed_since(wall_start):
                to_leader = time.monotonic() - started
            if to_progress is None:
                moved = [t for t in list(self.watch.transitions) if t > started]
                if moved:
                    to_progress = moved[0] - started
                elif self.round_done():
                    to_progress = 0.0  # nothing left to move
            time.sleep(0.1)
        return to_leader, to_progress

    def schedule(self) -> list[str]:
        kinds = [k for k, n in self.plan.counts.items() for _ in range(n)]
        self.rng.shuffle(kinds)
        # The agent gone for good goes last but one: its node must still end explicit.
        if "agent-gone" in kinds:
            kinds.remove("agent-gone")
            kinds.insert(max(0, len(kinds) - 1), "agent-gone")
        return kinds

    def run(self) -> None:
        assert self.watch is not None
        schedule = self.schedule()
        half = len(schedule) // 2
        for index, kind in enumerate(schedule):
            if index == half:
                for node in self.busy_for_a_while:
                    idle_again(self.rig, node)
            if self.round_done():
                self.next_round()
            time.sleep(self.rng.uniform(*self.plan.gap))
            breaches_before = len(self.watch.breaches)
            started, wall_start = time.monotonic(), time.time()
            detail = self.inject(kind)
            injecting = time.monotonic() - started
            to_leader, to_progress = self.recover(time.monotonic(), wall_start)
            self.say(
                f"{index + 1}/{len(schedule)} {kind}: {detail} ({injecting:.1f} s); then a "
                f"leader after {to_leader}, progress after {to_progress}; breaches so far "
                f"{len(self.watch.breaches)}"
            )
            self.report.faults.append(
                FaultResult(
                    kind,
                    detail,
                    injecting,
                    to_leader,
                    to_progress,
                    len(self.watch.breaches) - breaches_before,
                )
            )
        if not schedule or half == 0:
            for node in self.busy_for_a_while:
                idle_again(self.rig, node)

    # -- the end ----------------------------------------------------------------------------

    def settled(self) -> dict[str, str]:
        """Nodes not (yet) in an explicit end: Done at the target and verified, or Blocked or
        Failed with a reason."""
        unsettled = {}
        for node in self.nodes:
            obj = self.rig.node(node)
            labels = obj["metadata"].get("labels") or {}
            notes = obj["metadata"].get("annotations") or {}
            phase = labels.get(names.STATE_LABEL, "")
            version = notes.get(names.STATE_VERSION, "")
            reason = notes.get(names.REASON, "")
            if phase == "Done" and version == self.target and reason.startswith("verified"):
                continue
            if phase in ("Blocked", "Failed") and reason:
                continue
            unsettled[node] = f"{phase} {version}: {reason!r}"
        return unsettled

    def _settle(self, stall_seconds: float) -> None:
        """Waits until every node ends explicit for as long as the rollout moves: what is left
        is reported once no node has changed for `stall_seconds`. Real KMM's pace (a worker
        Pod per load and unload) depends on the machine's load, and a rollout that still moves
        is not stuck; the test's own timeout bounds the whole."""
        left = self.settled()
        last_move = time.monotonic()
        while left and time.monotonic() - last_move < stall_seconds:
            time.sleep(SETTLE_POLL_SECONDS)
            now = self.settled()
            if now != left:
                left, last_move = now, time.monotonic()

    def _rollout_message(self) -> str:
        try:
            return str(self.rig.rollout_status().get("message", ""))
        except Exception as err:  # the end is reported even if the API server is down
            return f"(status unreadable: {err})"

    def finish(self, stall_seconds: float) -> None:
        if self.watch is None:  # setup failed: stop what it started, report nothing
            self.replicas.stop()
            return
        self._settle(stall_seconds)
        self.report.unsettled = self.settled()
        self.report.rollout_message = self._rollout_message()
        for node in self.busy_for_good:
            if self._state(self.rig.node(node)) == ("Done", self.target):
                self.report.unsettled[node] = "Done at the target although busy for good"
        self.watch.stop()
        self.report.breaches = list(self.watch.breaches)
        self.report.relists = self.watch.relists
        self.replicas.stop()
        self.report.coordinator_exits = self.replicas.exits()
        self.report.unloads_while_busy = self.rig.kernels.violations
        self.report.kubelet_errors = len(self.rig.kmm.kubelet.errors)


def run_chaos(
    world: ChaosWorld,
    plan: ChaosPlan,
    settle_stall_seconds: float = 240.0,
    say: Callable[[str], None] = lambda _line: None,
) -> ChaosReport:
    started = time.monotonic()
    run = _Run(world, plan, say)
    try:
        run.setup()
        run.run()
    finally:
        run.finish(settle_stall_seconds)
        run.report.seconds = time.monotonic() - started
    return run.report
