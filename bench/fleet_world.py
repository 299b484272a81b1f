"""The simulated fleet bench.fleet_scale rolls out: a control plane, kwok nodes, their pools.

A real control plane (testbed/harness) with kube-scheduler, the Deployment/ReplicaSet
controllers and kwok holds N kwok Nodes in K pools (label `bench-pool`, K contiguous runs of
names), each with one GPU and a Running GPU pod, an agent Pod with a bound token, and the
GPUDriver of its pool ("gpu" when the fleet is one pool) with the Module the coordinator would
write, which KMM's own operator (bench.kmm_fleet) has loaded on every node at the old version.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.agent_swarm import agent_token
from bench.fleet_observe import wait_for
from bench.floor_workload import Workload
from bench.kmm_fleet import KERNEL
from coordinator.kube.client import MERGE_PATCH, Kube, path
from gpuctl.common import names
from gpuctl.common.names import KMM_GROUP, KMM_VERSION
from gpuctl.common.names import KMM_MODULE_PLURAL as KMM_PLURAL
from gpuctl.gpudriver.module_spec import desired_module, kmm_version, module_name
from gpuctl.rollout.input.build import kmm_labels
from testbed.harness.access import KubeCluster
from testbed.harness.binaries import find_binaries
from testbed.harness.cluster import repository_root, start_cluster
from testbed.harness.kwok import find_kwok
from testbed.harness.node_lifecycle import start_node_lifecycle
from testbed.harness.nodes import node_status
from testbed.kwok_nodes import GPU_RESOURCE, WORKLOAD_LABEL, gpu_deployment

NAMESPACE = "fleet"
DRIVER = "gpu"
SELECTOR = "bench=fleet"
POOL_LABEL = "bench-pool"
AGENT_SA = "gpuctl-agent"
OLD_VERSION = "v6.17.13.62_260409.8"
NEW_VERSION = "v7.1.4.6_260728.7"  # the backport tag bench.agent_swarm's reports carry
FLOOR_VERSION = "v7.1.5.2_260815.3"  # where bench.kmm_floor's script takes the fleet next
STEPPED_VERSION = "v7.1.6.1_260901.2"  # then, with gpuctl's node writes (--stepped-floor)
DRAINED_VERSION = "v7.1.7.4_260922.1"  # then with KMM's docs' steps 3 and 7 (the workload off)
TRAIN = "train"  # the Deployment with one Running GPU pod on every node
WORKLOAD = Workload(NAMESPACE, f"{WORKLOAD_LABEL}={TRAIN}")  # its pods (gpu_deployment's label)
# kwok renews each Lease every LEASE/4 s: at 5,000 nodes 33 writes/s, like kubelets with a
# 10 min status period and far below a real cluster's 10 s renewals; nothing here needs
# NotReady, so the node monitor's grace period is longer than any run.
LEASE_SECONDS = 600
GRACE_SECONDS = 7200


def pool_of(index: int, nodes: int, shards: int) -> int:
    """The pool of the fleet's `index`th node: K contiguous runs of names."""
    return index * shards // nodes


def pool_name(pool: int) -> str:
    return f"p{pool}"


def driver_of(pool: int, shards: int) -> str:
    """A pool's GPUDriver: "gpu" for the whole fleet when it is not sharded."""
    return DRIVER if shards == 1 else f"{DRIVER}-{pool_name(pool)}"


def image_of(version: str) -> str:
    """The kernel mapping's image, as fleets write it: KMM fills in each node's kernel."""
    return f"registry.example.com/xe:{version}-$KERNEL_FULL_VERSION"


def spec(version: str, pool: int | None = None) -> dict[str, Any]:
    """The GPUDriver spec, for the whole fleet or (`pool`) for one pool's nodes."""
    selector = {"bench": "fleet"}
    if pool is not None:
        selector[POOL_LABEL] = pool_name(pool)
    return {
        "nodeSelector": selector,
        "kernelModule": {
            "version": version,
            "kernelMappings": [{"regexp": "^.+$", "containerImage": image_of(version)}],
        },
        "rollout": {
            "maxUnavailable": "10%",
            "holdAfterFirstNode": False,
            "evictGPUPods": True,
            "timeouts": {"check": "10m", "drain": "10m", "prepare": "10m", "load": "10m"},
        },
    }


OLD, NEW = kmm_version(spec(OLD_VERSION)), kmm_version(spec(NEW_VERSION))


# -- the fleet ----------------------------------------------------------------------------


def create_fleet(cluster: KubeCluster, count: int, shards: int) -> list[tuple[str, str]]:
    """`count` kwok Nodes in `shards` pools, labelled and targeted at OLD by their pool's
    GPUDriver, with one GPU, an agent Pod on each and its bound token; returns (node, token)
    pairs."""
    now = datetime.datetime.now(datetime.UTC)
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", GPU_RESOURCE: "1"}
    local = threading.local()

    def one(index: int) -> tuple[str, str]:
        if not hasattr(local, "kube"):
            local.kube = Kube(cluster.admin_client())
        kube: Kube = local.kube
        node = f"fleet-{index:05d}"
        pool = pool_of(index, count, shards)
        driver = driver_of(pool, shards)
        node_labels = {
            "kubernetes.io/arch": "amd64",
            "bench": "fleet",
            POOL_LABEL: pool_name(pool),
            names.TARGET_LABEL: driver,
            kmm_labels(NAMESPACE, module_name(driver)).version: OLD,
        }
        kube.request(
            "POST",
            path("", "v1", "nodes"),
            body={"metadata": {"name": node, "labels": node_labels}},
        )
        status = {
            **node_status(KERNEL, now),
            "capacity": resources,
            "allocatable": resources,
        }
        kube.request(
            "PATCH",
            path("", "v1", "nodes", name=node, subresource="status"),
            body={"status": status},
            content_type=MERGE_PATCH,
        )
        return node, agent_token(kube, NAMESPACE, AGENT_SA, node)

    with ThreadPoolExecutor(6) as pool:
        return list(pool.map(one, range(count)))


def count_nodes(kube: Kube, selector: str) -> int:
    listed = kube.request(
        "GET", path("", "v1", "nodes"), query={"labelSelector": selector, "limit": 10000}
    )
    return len(listed.get("items") or [])


def running_gpu_pods(kube: Kube) -> int:
    listed = kube.request(
        "GET",
        path("", "v1", "pods", namespace=NAMESPACE),
        query={"labelSelector": WORKLOAD.selector, "fieldSelector": "status.phase=Running"},
    )
    return len(listed.get("items") or [])


# -- one run --------------------------------------------------------------------------------


@dataclass
class World:
    """What one run started, stopped last first by `close`."""

    kube: Kube
    cluster: KubeCluster
    agents: list[tuple[str, str]] = field(default_factory=list)
    cleanup: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        for step in reversed(self.cleanup):
            try:
                step()
            except Exception as err:
                print(f"cleanup: {err}", file=sys.stderr)


def start_world(args: argparse.Namespace, root: Path, figures: dict[str, Any]) -> World:
    """The control plane, kwok and its controllers, the fleet with a GPU pod on every node."""
    repo = repository_root()
    kwok_binary = find_kwok(repo, os.environ)
    kube_folder = find_binaries(repo, os.environ).apiserver.parent
    control_plane, cluster = start_cluster(
        root / "cluster",
        repo,
        os.environ,
        datetime.datetime.now(datetime.UTC),
        die_with_parent=True,
    )
    world = World(Kube(cluster.admin_client()), cluster, cleanup=[control_plane.stop])
    try:
        lifecycle = start_node_lifecycle(
            control_plane.layout,
            kube_folder=kube_folder,
            kwok_binary=kwok_binary,
            die_with_parent=True,
            grace_seconds=GRACE_SECONDS,
            lease_seconds=LEASE_SECONDS,
        )
        world.cleanup.append(lifecycle.stop)
        kube = world.kube
        kube.request("POST", path("", "v1", "namespaces"), body={"metadata": {"name": NAMESPACE}})
        kube.request(
            "POST",
            path("", "v1", "serviceaccounts", namespace=NAMESPACE),
            body={"metadata": {"name": AGENT_SA}},
        )
        started = time.perf_counter()
        world.agents = create_fleet(cluster, args.nodes, args.shards)
        gpu_deployment(
            kube, NAMESPACE, TRAIN, replicas=args.nodes, node_selector={"bench": "fleet"}
        )
        wait_for(
            "a Running GPU pod on every node",
            lambda: running_gpu_pods(kube) >= args.nodes,
            args.nodes * 0.5 + 300,
            poll=5,
        )
        figures["setup_seconds"] = time.perf_counter() - started
        print(
            f"setup: {args.nodes} kwok nodes, agent pods, tokens and GPU pods in "
            f"{figures['setup_seconds']:.0f} s",
            flush=True,
        )
    except BaseException:
        world.close()
        raise
    return world


def loaded_at_old(world: World, nodes: int, shards: int) -> None:
    """The fleet as a finished rollout left it: each pool's GPUDriver, the Module the
    coordinator would write, and KMM's worker having loaded it at the old version on every
    node (its ready labels say so), before the coordinators start."""
    kube = world.kube
    ready: list[str] = []
    for pool in range(shards):
        driver = driver_of(pool, shards)
        metadata: dict[str, Any] = {"name": driver}
        if shards > 1:
            metadata["labels"] = {POOL_LABEL: pool_name(pool)}
        created = kube.request(
            "POST",
            path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL),
            body={
                "apiVersion": names.API_VERSION,
                "kind": "GPUDriver",
                "metadata": metadata,
                "spec": spec(OLD_VERSION, pool if shards > 1 else None),
            },
        )
        module = desired_module(created, NAMESPACE)
        assert module is not None
        module["spec"]["moduleLoader"]["container"]["version"] = OLD
        kube.request(
            "POST", path(KMM_GROUP, KMM_VERSION, KMM_PLURAL, namespace=NAMESPACE), body=module
        )
        ready.append(kmm_labels(NAMESPACE, module_name(driver)).version_ready)
    wait_for(
        "KMM reports the old version everywhere",
        lambda: sum(count_nodes(kube, f"{SELECTOR},{label}={OLD}") for label in ready) >= nodes,
        nodes * 2 + 300,
        poll=3,
    )
