"""One rollout pass's CPU, with what each node's facts and wanted answer kept from the last
pass and without.

    .venv/bin/python -m bench.rollout_pass [--nodes 300 1000] [--passes 200]

A pass is what the coordinator computes for one GPUDriver (coordinator/rollout/gather.py,
then decide): the nodes it considers (pass_nodes), the decision's input (rollout_input) and
the decision (decide). The fleet is a mid-rollout snapshot as a watch cache holds it: Nodes
as plain dicts with a kwok node's labels, annotations and conditions, 40 % Done at the new
version, a maxUnavailable of 10 % in gpuctl's steps, the rest Done at the old version, and the
Module asking for the new version. Between two passes one node changes, as one watch event
makes a pass: its object is replaced at a new resourceVersion, one step further.

- subject: pass_nodes with a WantedMemo (gpuctl/gpudriver/wanted_memo.py) and rollout_input
  with a NodeFactsMemo (gpuctl/rollout/input/memo.py), as the coordinator runs them;
- baseline: the same passes asking every node afresh (no memo).

Passes alternate between the two (bench.timing.measure_interleaved), each on its own copy of
the fleet with the same changes; both decisions are checked equal on the way. Prints the
median and p95 per pass and the ratio.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bench.timing import measure_interleaved, ratio_line
from coordinator.rollout.gather import NEEDS_PODS
from gpuctl.common import names
from gpuctl.common.nodes import node_name
from gpuctl.gpudriver.module_spec import kmm_version, module_name
from gpuctl.gpudriver.wanted_memo import WantedMemo
from gpuctl.rollout.decide import decide
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.input.build import Reads, kmm_labels, pass_nodes, rollout_input
from gpuctl.rollout.input.facts import RolloutInput
from gpuctl.rollout.input.memo import NodeFactsMemo
from gpuctl.rollout.input.pass_setup import pass_setup
from gpuctl.rollout.input.pod_facts import node_pod_facts
from gpuctl.rollout.input.records import BootRecord, encode_boot

NAMESPACE = "gpuctl-system"
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
KERNEL = "6.8.0-60-generic"
GPU = "gpu.intel.com/xe"
SPEC: dict[str, Any] = {
    "nodeSelector": {"bench": "fleet"},
    "kernelModule": {
        "version": "v7.1.4.6_260728.7",
        "kernelMappings": [
            {"regexp": "^.+$", "containerImage": "registry.example.com/xe:7-$KERNEL_FULL_VERSION"}
        ],
    },
    "rollout": {"maxUnavailable": "10%", "holdAfterFirstNode": False, "evictGPUPods": True},
}
DRIVER: dict[str, Any] = {"metadata": {"name": "gpu", "generation": 2}, "spec": SPEC}
NEW = kmm_version(SPEC)
OLD = "v6.17.13.62_260409.8-9f8e7d6c"
LABELS = kmm_labels(NAMESPACE, module_name("gpu"))
# A node's steps, each one further than the last (Done at the new version ends it).
STEPS = ("Checking", "Draining", "Preparing", "Loading", "Verifying", "Done")


def kwok_node(index: int, version: int, state: str, driver_version: str) -> dict[str, Any]:
    """A Node as the coordinator's watch cache holds it, in gpuctl's `state`."""
    name = f"fleet-{index:05}"
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/role": "agent",
        "node-role.kubernetes.io/agent": "",
        "node.kubernetes.io/instance-type": "gpu.xe.2x",
        "topology.kubernetes.io/region": "eu-west",
        "topology.kubernetes.io/zone": f"eu-west-{index % 3}",
        "type": "kwok",
        "bench": "fleet",
        names.STATE_LABEL: state,
        names.TARGET_LABEL: "gpu",
        LABELS.version: driver_version,
    }
    annotations = {
        "kwok.x-k8s.io/node": "fake",
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        names.GPUDRIVER: "gpu",
        names.STATE_VERSION: driver_version,
        names.SINCE: "2026-12-04T11:58:00Z",
    }
    if state == "Done":
        labels[LABELS.ready] = ""
        labels[LABELS.version_ready] = driver_version
        labels[names.DRIVER_READY_LABEL] = names.DRIVER_READY_VALUE
        annotations[names.VERIFIED_BOOT] = encode_boot(BootRecord(f"boot-{index}", KERNEL))
    return {
        "metadata": {
            "name": name,
            "resourceVersion": str(version),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"unschedulable": state in STEPS[1:-1]},
        "status": {
            "conditions": [
                {"type": kind, "status": "False" if kind != "Ready" else "True"}
                for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ],
            "nodeInfo": {"kernelVersion": KERNEL, "bootID": f"boot-{index}"},
        },
    }


@dataclass
class Fleet:
    """One copy of the fleet; `step()` moves one node a step further, as a watch event."""

    nodes: list[dict[str, Any]]
    moving: itertools.cycle[int]
    version: int = 1_000
    decisions: list[Decision] = field(default_factory=list)

    def step(self) -> None:
        index = next(self.moving)
        node = self.nodes[index]
        state = node["metadata"]["labels"][names.STATE_LABEL]
        following = STEPS[0] if state not in STEPS[:-1] else STEPS[STEPS.index(state) + 1]
        self.version += 1
        self.nodes[index] = kwok_node(index, self.version, following, NEW)


def fleet(count: int) -> Fleet:
    done, in_steps = count * 4 // 10, max(1, count // 10)
    nodes = []
    for index in range(count):
        if index < done:
            nodes.append(kwok_node(index, 1, "Done", NEW))
        elif index < done + in_steps:
            nodes.append(kwok_node(index, 1, STEPS[index % (len(STEPS) - 1)], NEW))
        else:
            nodes.append(kwok_node(index, 1, "Done", OLD))
    # The nodes in steps move, one per pass, round and round.
    return Fleet(nodes, itertools.cycle(range(done, done + in_steps)))


def pod(node: str, name: str, owner: str, *, ready: bool = True) -> dict[str, Any]:
    """A Running pod on `node` asking for one GPU, owned by a `owner` controller."""
    return {
        "metadata": {
            "namespace": "ml" if owner == "ReplicaSet" else "gpu-system",
            "name": f"{name}-{node}",
            "uid": f"uid-{name}-{node}",
            "ownerReferences": [{"kind": owner, "name": name, "controller": True}],
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": name, "resources": {"limits": {GPU: "1"}}}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pods_on(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A GPU node is never idle: a GPU daemon (a DaemonSet's) on every node, and the workload's
    GPU pod until the node is drained (Draining evicts it; it is back once Done)."""
    name = str(node["metadata"]["name"])
    pods = [pod(name, "xpu-manager", "DaemonSet")]
    if node["metadata"]["labels"][names.STATE_LABEL] in ("Done", "Checking"):
        pods.append(pod(name, "train", "ReplicaSet"))
    return pods


def module() -> dict[str, Any]:
    return {
        "metadata": {"name": module_name("gpu"), "namespace": NAMESPACE},
        "spec": {"moduleLoader": {"container": {"version": NEW}}},
    }


def pass_input(
    world: Fleet, memo: NodeFactsMemo | None, wanted_memo: WantedMemo | None
) -> RolloutInput:
    """One watch event, then the decision's input the coordinator's pass builds of the fleet."""
    world.step()
    setup = pass_setup(DRIVER, [DRIVER], None)
    assert setup.settings is not None
    considered, wanted = pass_nodes(DRIVER, world.nodes, setup.target, memo=wanted_memo)
    reads = Reads(
        driver=DRIVER,
        target=setup.target,
        settings=setup.settings,
        previous={},
        namespace=NAMESPACE,
        nodes=considered,
        wanted=wanted,
        claims=[],
        claims_trouble="",
        module=module(),
        images_config=None,
        now=NOW,
        # As the gatherer reads them: afresh each pass, for the nodes whose step looks at them.
        node_pods={
            node_name(n): node_pod_facts(pods_on(n))
            for n in considered
            if names.parse_phase(n["metadata"]["labels"].get(names.STATE_LABEL)) in NEEDS_PODS
        },
    )
    return rollout_input(reads, memo)


def one_pass(world: Fleet, memo: NodeFactsMemo | None, wanted: WantedMemo | None) -> None:
    """One watch event, then the coordinator's pass over the fleet."""
    world.decisions.append(decide(pass_input(world, memo, wanted)))


def run(count: int, passes: int) -> None:
    kept, fresh = fleet(count), fleet(count)
    memo, wanted = NodeFactsMemo(), WantedMemo()
    subject, baseline = measure_interleaved(
        {
            "kept": lambda: one_pass(kept, memo, wanted),
            "built afresh": lambda: one_pass(fresh, None, None),
        },
        runs=passes,
    )
    if kept.decisions != fresh.decisions:
        sys.exit(f"{count} nodes: the passes with the memos decided otherwise than without them")
    reused = memo.reused / max(1, memo.reused + memo.built)
    answers = wanted.reused / max(1, wanted.reused + wanted.asked)
    print(f"{count} nodes, {passes} passes, one node changed between passes:")
    print(
        f"  {subject.summary()} ({reused:.1%} of nodes' facts kept, "
        f"{answers:.1%} of their wanted answers)"
    )
    print(f"  {baseline.summary()}")
    print(f"  {ratio_line(subject, baseline)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[300, 1000])
    parser.add_argument("--passes", type=int, default=200)
    args = parser.parse_args(argv)
    for count in args.nodes:
        run(count, args.passes)


if __name__ == "__main__":
    main()
