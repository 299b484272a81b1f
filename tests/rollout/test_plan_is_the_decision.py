"""`gpuctl rollout plan` says what the coordinator then does (Hypothesis): random clusters, as
the API returns them, planned by the CLI's pure plan; then the coordinator's own passes on the
same objects (decide() on the input its gatherer would build, each pass's node writes made
before the next, as the API server would). Per node the plan's first move is the coordinator's
first move that is not a placement: it starts the node when the plan says start, and leaves it
waiting, for the same reason in the same words, when the plan says wait.

The `ci` profile runs a fixed set of examples (derandomized: the same ones every run);
HYPOTHESIS_PROFILE=long runs many random ones.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.cli.node_view import NodeView
from gpuctl.cli.rollout_plan import ClusterNode, RolloutPlanInput, plan_rollout
from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.gpudriver.module_spec import kmm_version
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.decide import decide
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.first_moves import MoveKind
from gpuctl.rollout.input.build import Reads, pass_nodes, rollout_input
from gpuctl.rollout.input.facts import INSPECT, CallState, GpuPod, node_facts, report_facts
from gpuctl.rollout.input.pass_setup import pass_setup
from gpuctl.rollout.input.records import BootRecord, encode_boot
from tests.support.rollout_samples import NOT_ENFORCING

EXAMPLES = {"ci": 60, "long": 2000}[os.environ.get("HYPOTHESIS_PROFILE", "ci")]
NS = "gpuctl-system"
DRIVER = "gpu"
NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC)
SPEC_BASE: dict[str, Any] = {
    "nodeSelector": {"pool": "gpu"},
    "kernelModule": {"kernelMappings": [{"regexp": r"^6\.8\.", "containerImage": "r/xe:2"}]},
}
TARGET = kmm_version(SPEC_BASE)
OLD = "v1-11111111"
KERNEL = "6.8.0-60-generic"
# A GPUDriver, its Nodes, each node's agent ("idle", "busy", "none") and GPU pods.
Cluster = tuple[dict[str, Any], list[dict[str, Any]], dict[str, str], dict[str, tuple[GpuPod, ...]]]
STATES = ("", "Pending", "Done-old", "Done", "Blocked", "Checking", "Failed", "Skipped")


def _node(i: int, draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    name = f"n{i}"
    in_pool = draw(st.booleans()) or i == 0
    state = draw(st.sampled_from(STATES))
    labels = {"kubernetes.io/arch": "amd64", "pool": "gpu" if in_pool else "cpu"}
    annotations: dict[str, str] = {}
    version_label = names.kmm_version_label(NS, f"{DRIVER}-gpu")
    if state:
        phase, _, old = state.partition("-")
        version = OLD if old else TARGET
        labels[names.STATE_LABEL] = phase
        annotations.update(
            {
                names.STATE_VERSION: version,
                names.GPUDRIVER: DRIVER,
                names.SINCE: "2026-12-02T11:59:00Z",
            }
        )
        if phase == "Blocked":
            annotations[names.REASON] = "pid 1 (xpumd) holds renderD128"
        if phase == "Skipped":
            labels[names.OPT_OUT_LABEL] = names.OPT_OUT_VALUE
        if phase in ("Done", "Failed", "Checking"):
            labels[names.TARGET_LABEL] = DRIVER
            labels[version_label] = version
        if phase == "Done" and draw(st.booleans()):
            # Verified in boot-1: a node now in another boot rebooted since (reboots.py).
            annotations[names.VERIFIED_BOOT] = encode_boot(BootRecord("boot-1", KERNEL))
    elif draw(st.booleans()):
        labels[names.TARGET_LABEL] = DRIVER
    node = {
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"unschedulable": draw(st.booleans()) and draw(st.booleans())},
        "status": {
            "conditions": [
                {"type": "Ready", "status": draw(st.sampled_from(["True"] * 4 + ["False"]))}
            ],
            "nodeInfo": {
                "kernelVersion": draw(st.sampled_from([KERNEL] * 4 + ["5.15.0-1"])),
                "bootID": draw(st.sampled_from(["boot-1", "boot-1", "boot-2", ""])),
            },
        },
    }
    return node, draw(st.sampled_from(["idle", "busy", "none"]))


@st.composite
def clusters(
    draw: st.DrawFn,
) -> Cluster:
    rollout = {
        "maxUnavailable": draw(st.integers(min_value=1, max_value=3)),
        "holdAfterFirstNode": draw(st.booleans()),
        "paused": draw(st.sampled_from([False] * 4 + [True])),
        "evictGPUPods": draw(st.booleans()),
    }
    driver: dict[str, Any] = {
        "metadata": {"name": DRIVER},
        "spec": {**SPEC_BASE, "rollout": rollout},
        "status": {"module": f"modules.kmm.sigs.x-k8s.io/{NS}/{DRIVER}-gpu"},
    }
    count = draw(st.integers(min_value=1, max_value=6))
    nodes: list[dict[str, Any]] = []
    agents: dict[str, str] = {}
    pods: dict[str, tuple[GpuPod, ...]] = {}
    for i in range(count):
        node, agent = _node(i, draw)
        nodes.append(node)
        agents[f"n{i}"] = agent
        if draw(st.booleans()) and draw(st.booleans()):
            pods[f"n{i}"] = (GpuPod("ml", f"job-{i}"),)
    return driver, nodes, agents, pods


def _report(agent: str) -> pb.NodeReport | None:
    if agent == "none":
        return None
    report = pb.NodeReport(kernel_trust=NOT_ENFORCING)
    report.module.name = "xe"
    report.module.state = pb.Module.LIVE
    if agent == "busy":
        report.blockers.add(reason=pb.Blocker.OPEN_CLIENTS, message="pid 1 (xpumd) holds it")
    return report


def _module() -> dict[str, Any]:
    return {
        "metadata": {"namespace": NS, "name": f"{DRIVER}-gpu"},
        "spec": {"moduleLoader": {"container": {"version": TARGET}}},
    }


def _patch(node: Mapping[str, Any], write: PatchNode) -> dict[str, Any]:
    """The Node after the merge patch `write`, as the API server makes it (the test's own)."""
    meta = {**node["metadata"]}
    for key, changes in (("labels", write.labels), ("annotations", write.annotations)):
        merged = {**meta.get(key, {}), **changes}
        meta[key] = {k: v for k, v in merged.items() if v is not None}
    spec = {**node["spec"]}
    if write.unschedulable is not None:
        spec["unschedulable"] = write.unschedulable
    return {**node, "metadata": meta, "spec": spec}


def _coordinator_pass(
    driver: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    agents: Mapping[str, str],
    pods: Mapping[str, tuple[GpuPod, ...]],
) -> tuple[list[str], Decision]:
    """One pass as the coordinator makes it: its setup, its nodes, its call table holding each
    agent's answer to the current step's inspect request; the considered nodes and decision."""
    setup = pass_setup(driver, [driver])
    assert setup.settings is not None
    considered, wanted = pass_nodes(driver, nodes, setup.target)
    calls = {}
    for node in considered:
        facts = node_facts(node)
        report = _report(agents[facts.name])
        if report is not None:
            answered = CallState(INSPECT, facts.attempt, 0.0, 0.0, report=report_facts(report))
            calls[facts.name] = {INSPECT: answered}
    reads = Reads(
        driver=driver,
        target=setup.target,
        settings=setup.settings,
        previous={},
        namespace=NS,
        nodes=considered,
        wanted=wanted,
        claims=[],
        claims_trouble="",
        module=_module(),
        images_config=None,
        now=NOW,
        gpu_pods={
            str(n["metadata"]["name"]): pods.get(str(n["metadata"]["name"]), ()) for n in considered
        },
        calls=calls,
    )
    return [str(n["metadata"]["name"]) for n in considered], decide(rollout_input(reads))


def _coordinator_first_moves(
    driver: Mapping[str, Any],
    nodes: list[dict[str, Any]],
    agents: Mapping[str, str],
    pods: Mapping[str, tuple[GpuPod, ...]],
) -> dict[str, tuple[str, str]]:
    """Per node, the coordinator's first act that is not a placement: ("start", ""),
    ("wait", kind and words), or ("other", "")."""
    first: dict[str, tuple[str, str]] = {}
    for _ in range(6):
        considered, decision = _coordinator_pass(driver, nodes, agents, pods)
        by_name = {str(n["metadata"]["name"]): n for n in nodes}
        placed = False
        for name in considered:
            if name in first:
                continue
            writes = [a for a in decision.actions if isinstance(a, PatchNode) and a.node == name]
            phase = names.parse_phase(by_name[name]["metadata"]["labels"].get(names.STATE_LABEL))
            wait = decision.waits.get(name)
            if wait is not None:
                first[name] = ("wait", f"{wait.kind.value}: {wait.words}")
            elif any(
                # A start: to Checking from outside a step (Pending, Blocked, or an older
                # version's Done, which is Pending without a write).
                w.phase_to is Phase.CHECKING and phase not in names.IN_PROGRESS
                for w in writes
            ):
                first[name] = ("start", "")
            elif (
                writes
                and phase not in names.IN_PROGRESS
                and all(
                    names.STATE_LABEL not in w.labels or w.labels[names.STATE_LABEL] is not None
                    for w in writes
                )
                and any(w.phase_to is not None for w in writes)
            ):
                placed = True  # put in its place: its first act comes in a later pass
            else:
                first[name] = ("other", "")
        if not placed:
            break
        for action in decision.actions:
            if isinstance(action, PatchNode):
                index = next(i for i, n in enumerate(nodes) if n["metadata"]["name"] == action.node)
                nodes[index] = _patch(nodes[index], action)
    return first


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci",
    suppress_health_check=[HealthCheck.too_slow],
)
@given(clusters())
def test_the_plan_says_what_the_coordinator_does_first(
    cluster: tuple[
        dict[str, Any], list[dict[str, Any]], dict[str, str], dict[str, tuple[GpuPod, ...]]
    ],
) -> None:
    driver, nodes, agents, pods = cluster
    views = {
        name: NodeView(name, True, report, datetime.timedelta(seconds=1))
        for name, agent in agents.items()
        if (report := _report(agent)) is not None
    }
    facts = [
        ClusterNode(n, views.get(n["metadata"]["name"]), pods.get(n["metadata"]["name"], ()))
        for n in nodes
    ]
    plan = plan_rollout(RolloutPlanInput(driver, _module(), facts, drivers=[driver], now=NOW))
    coordinator = _coordinator_first_moves(driver, [dict(n) for n in nodes], agents, pods)
    for planned in plan.nodes:
        move = planned.first_move
        if move is None:
            continue
        did, why = coordinator.get(planned.name, ("other", ""))
        if move.kind is MoveKind.START:
            assert did == "start", (planned, did, why)
            assert planned.verdict in ("go", "wait", "blocked")
        elif move.kind is MoveKind.WAIT:
            assert move.wait is not None
            assert (did, why) == ("wait", f"{move.wait.kind.value}: {move.wait.words}"), planned
        else:
            assert did == "other", (planned, did, why)
        if planned.verdict == "go" and move.kind is MoveKind.START:
            assert agents[planned.name] != "busy" or pods.get(planned.name), planned
