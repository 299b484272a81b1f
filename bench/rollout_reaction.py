"""The rollout engine's own reaction time and API cost per node, against a polling baseline.

    .venv/bin/python -m bench.rollout_reaction [--nodes 200] [--baseline-nodes 20] [--poll 1.0]

A real control plane (testbed/harness: etcd + kube-apiserver) holds the Nodes, a GPUDriver and
its KMM Module; KMM's own operator loads and unloads (bench.kmm_fleet: its worker Pods over a
fake host per node, as fast as this machine runs them); agents answer instantly with what KMM
reports loaded (an in-process stand-in for the gRPC streams, so the figure is the
coordinator's own delay, not an agent's inspection). Nodes start labelled and loaded at an old
version; the GPUDriver and its Module then ask for a new one, and the engine rolls every node,
one at a time.

Measured, per node: the delay between the write that marks one node Done and the write that
sets the next node's version label (that next node's check, cordon, drain and preparation
steps included), median and p99; and the API requests the engine made per node (a counting
wrapper around its API client; watches count once).

- subject: coordinator.rollout.controller.RolloutController as gpuctl-coordinator runs it:
  watch caches, a pass on every change;
- baseline: the same engine and decisions, driven the way upgrade controllers in the field
  are: a pass every `--poll` seconds that relists everything (GPUDrivers, Nodes, Modules,
  claims) instead of watching. Field controllers poll every 120 s; the figure for that
  interval is the measured per-step polls times 120 s, printed as the reference.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import os
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from bench.kmm_fleet import KERNEL, KmmFleet
from bench.request_kinds import resource_kind
from bench.timing import Timings, ratio_line
from coordinator.kube.client import JSON, MERGE_PATCH, Kube, KubeApi, KubeError, path
from coordinator.kube.events import EventRecorder
from coordinator.kube.watches import Informer, Resource
from coordinator.rollout.config import RolloutConfig
from coordinator.rollout.controller import RolloutController
from coordinator.rollout.metrics import RolloutMetrics
from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from gpuctl.common import names, timestamps
from gpuctl.common.names import KMM_GROUP, KMM_IMAGES_CONFIG_PLURAL, KMM_VERSION
from gpuctl.common.names import KMM_MODULE_PLURAL as KMM_PLURAL
from gpuctl.gpudriver.module_spec import desired_module, kmm_version
from gpuctl.rollout.input.build import kmm_labels
from gpuctl.rollout.input.kmm_boots import boot_part, configured_kernel, loaded_boot
from testbed.harness.cluster import repository_root, start_cluster
from testbed.harness.nodes import create_node
from testbed.harness.real_kmm import RealKmm

NAMESPACE = "gpuctl-bench"
OLD_VERSION, NEW_VERSION = "v6.17.13.62_260409.8", "v7.1.4.6_260728.7"
PF = "0000:03:00.0"
# One image, as fleets write it (KMM fills in the kernel): the versions differ in the Module only.
IMAGE = "registry.example.com/xe:1-$KERNEL_FULL_VERSION"
ROLLOUT = {
    "holdAfterFirstNode": False,
    "timeouts": {"check": "60s", "drain": "60s", "prepare": "60s", "load": "60s", "verify": "60s"},
}


def spec_at(driver: str, version: str) -> dict[str, Any]:
    return {
        "nodeSelector": {"bench": driver},
        "kernelModule": {
            "version": version,
            "kernelMappings": [{"regexp": "^.+$", "containerImage": IMAGE}],
        },
        "rollout": ROLLOUT,
    }


# The Module's versions (what the rollout targets): the user's version plus a config digest.
OLD, NEW = kmm_version(spec_at("", OLD_VERSION)), kmm_version(spec_at("", NEW_VERSION))


class CountingKube:
    """A KubeApi that counts requests ("<METHOD> <resource_kind>") and timestamps the node
    writes that matter here."""

    def __init__(self, inner: Kube, version_label: str) -> None:
        self._inner = inner
        self._label = version_label
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.done_at: dict[str, float] = {}
        self.labelled_at: dict[str, float] = {}

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()

    def request(
        self,
        method: str,
        resource_path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        answer = self._inner.request(
            method,
            resource_path,
            query=query,
            body=body,
            content_type=content_type,
            timeout=timeout,
        )
        now = time.perf_counter()
        with self._lock:
            self.counts[f"{method} {resource_kind(resource_path)}"] += 1
            if method == "PATCH" and resource_path.startswith("/api/v1/nodes/"):
                node = resource_path.rsplit("/", 1)[1]
                meta = (body or {}).get("metadata") or {}
                labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
                if (
                    labels.get(names.STATE_LABEL) == "Done"
                    and notes.get(names.STATE_VERSION) == NEW
                ):
                    self.done_at[node] = now
                if labels.get(self._label) == NEW:
                    self.labelled_at[node] = now
        return answer

    def watch(
        self, resource_path: str, query: dict[str, Any], timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        with self._lock:
            self.counts[f"WATCH {resource_kind(resource_path)}"] += 1
        return self._inner.watch(resource_path, query, timeout_seconds)

    def close(self) -> None:
        self._inner.close()

    def total(self) -> int:
        with self._lock:
            return sum(self.counts.values())

    def by_kind(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)


class InstantAgents:
    """Agents answering at once with what KMM reports loaded on their node."""

    def __init__(self, kmm: RealKmm, module: str) -> None:
        self._kmm = kmm
        self._module = module

    def _report(self, node: str) -> report_pb.NodeReport:
        report = report_pb.NodeReport(node_name=node)
        loaded = self._kmm.loaded(self._module, node)
        report.devices.add(pci_address=PF, driver="xe" if loaded else "")
        if loaded:
            report.module.state = report_pb.Module.LIVE
            # The image's module carries the user's version, not the Module's digest.
            report.module.backport_tag = f"xeb_{loaded.version.rsplit('-', 1)[0]}"
            report.module.srcversion = loaded.version
        else:
            report.module.state = report_pb.Module.NOT_LOADED
        return report

    def request_report(self, node: str, timeout: float) -> Future[report_pb.NodeReport]:
        future: Future[report_pb.NodeReport] = Future()
        future.set_result(self._report(node))
        return future

    def request_prepare(
        self, node: str, request: agent_pb.PrepareRequest, timeout: float
    ) -> Future[agent_pb.PrepareResult]:
        future: Future[agent_pb.PrepareResult] = Future()
        future.set_result(agent_pb.PrepareResult(request_id=request.request_id, ready=True))
        return future

    def request_restore(
        self, node: str, request: agent_pb.RestoreRequest, timeout: float
    ) -> Future[agent_pb.RestoreResult]:
        future: Future[agent_pb.RestoreResult] = Future()
        future.set_result(agent_pb.RestoreResult(request_id=request.request_id))
        return future


class WatchedView:
    """The coordinator's way: watch caches, a callback on every change."""

    def __init__(self, kube: KubeApi, on_change: Callable[[str, dict[str, Any]], None]) -> None:
        self.stop = threading.Event()
        self._informers = {
            "drivers": Informer(
                kube,
                Resource(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL),
                on_change,
                self.stop,
            ),
            "nodes": Informer(kube, Resource("", "v1", "nodes"), on_change, self.stop),
            "modules": Informer(
                kube, Resource(KMM_GROUP, KMM_VERSION, KMM_PLURAL, NAMESPACE), on_change, self.stop
            ),
            "claims": Informer(
                kube, Resource("resource.k8s.io", "v1", "resourceclaims"), on_change, self.stop
            ),
            "images": Informer(
                kube,
                Resource(KMM_GROUP, KMM_VERSION, KMM_IMAGES_CONFIG_PLURAL, NAMESPACE),
                on_change,
                self.stop,
            ),
            "node_configs": Informer(
                kube,
                Resource(KMM_GROUP, KMM_VERSION, names.KMM_NODE_CONFIG_PLURAL),
                on_change,
                self.stop,
                keep=boot_part,
            ),
        }
        for informer in self._informers.values():
            threading.Thread(target=informer.run, daemon=True).start()
        for informer in self._informers.values():
            informer.wait_synced(30)

    def drivers(self) -> list[dict[str, Any]]:
        return self._informers["drivers"].snapshot()

    def nodes(self) -> list[dict[str, Any]]:
        return self._informers["nodes"].snapshot()

    def claims(self) -> list[dict[str, Any]]:
        return self._informers["claims"].snapshot()

    def claims_trouble(self) -> str:
        return self._informers["claims"].trouble()

    def claims_served(self) -> bool:
        return self._informers["claims"].served()

    def module(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._informers["modules"].get(f"{namespace}/{name}")

    def pods_on(self, node: str) -> list[dict[str, Any]] | None:
        return None  # no Pod watch here: the engine lists each node's pods

    def module_images(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._informers["images"].get(f"{namespace}/{name}")

    def images_trouble(self) -> str:
        return self._informers["images"].trouble()

    def kmm_boot_id(self, node: str, namespace: str, module: str) -> str | None:
        configs = self._informers["node_configs"]
        if configs.trouble():
            return None
        return loaded_boot(configs.get(node), namespace, module)

    def kmm_kernel(self, node: str, namespace: str, module: str) -> str | None:
        configs = self._informers["node_configs"]
        if configs.trouble():
            return None
        return configured_kernel(configs.get(node), namespace, module)


class RelistingView:
    """The polling way: every read is a fresh LIST."""

    def __init__(self, kube: KubeApi, selector: str) -> None:
        self._kube = kube
        self._selector = selector

    def _list(
        self, resource_path: str, query: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        return list(self._kube.request("GET", resource_path, query=query).get("items") or [])

    def drivers(self) -> list[dict[str, Any]]:
        return self._list(
            path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL),
            {"labelSelector": self._selector},
        )

    def nodes(self) -> list[dict[str, Any]]:
        return self._list(path("", "v1", "nodes"))

    def claims(self) -> list[dict[str, Any]]:
        return self._list(path("resource.k8s.io", "v1", "resourceclaims"))

    def claims_trouble(self) -> str:
        return ""  # claims() lists afresh, or raises

    def claims_served(self) -> bool:
        return True  # the bench's API server serves DRA

    def module(self, namespace: str, name: str) -> dict[str, Any] | None:
        for module in self._list(path(KMM_GROUP, KMM_VERSION, KMM_PLURAL, namespace=namespace)):
            if module["metadata"]["name"] == name:
                return module
        return None

    def pods_on(self, node: str) -> list[dict[str, Any]] | None:
        return None  # the engine lists each node's pods afresh

    def module_images(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._kube.request(
                "GET",
                path(
                    KMM_GROUP, KMM_VERSION, KMM_IMAGES_CONFIG_PLURAL, namespace=namespace, name=name
                ),
            )
        except KubeError as error:
            if error.not_found:
                return None
            raise

    def images_trouble(self) -> str:
        return ""  # module_images() reads afresh, or raises

    def _node_config(self, node: str) -> dict[str, Any] | None:
        try:
            config: dict[str, Any] = self._kube.request(
                "GET", path(KMM_GROUP, KMM_VERSION, names.KMM_NODE_CONFIG_PLURAL, name=node)
            )
        except KubeError as error:
            if error.not_found:
                return None
            raise
        return config

    def kmm_boot_id(self, node: str, namespace: str, module: str) -> str | None:
        return loaded_boot(self._node_config(node), namespace, module)

    def kmm_kernel(self, node: str, namespace: str, module: str) -> str | None:
        return configured_kernel(self._node_config(node), namespace, module)


def set_up(
    kube: Kube, driver: str, nodes: int, *, now: datetime.datetime, admin: Any, fleet: KmmFleet
) -> list[str]:
    """`nodes` Nodes labelled at OLD (KMM loads it), a GPUDriver and its Module asking for OLD."""
    labels = kmm_labels(NAMESPACE, f"{driver}-gpu")
    names_ = []
    for index in range(nodes):
        name = f"{driver}-{index:04}"
        node_labels = {"kubernetes.io/arch": "amd64", "bench": driver}
        node_labels.update({names.TARGET_LABEL: driver, labels.version: OLD})
        create_node(admin, name, node_labels, now, kernel_version=KERNEL)
        fleet.host(name)
        names_.append(name)
    spec = spec_at(driver, OLD_VERSION)
    created = kube.request(
        "POST",
        path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL),
        body={
            "apiVersion": names.API_VERSION,
            "kind": "GPUDriver",
            "metadata": {"name": driver, "labels": {"bench": driver}},
            "spec": spec,
        },
    )
    module = desired_module(created, NAMESPACE)
    assert module is not None
    module["spec"]["moduleLoader"]["container"]["version"] = OLD
    kube.request("POST", path(KMM_GROUP, KMM_VERSION, KMM_PLURAL, namespace=NAMESPACE), body=module)
    return names_


def wait_for(description: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {description}")
        time.sleep(0.2)


def all_in(kube: Kube, selector: str, label: str, value: str) -> bool:
    items = kube.request("GET", path("", "v1", "nodes"), query={"labelSelector": selector})["items"]
    return all((n["metadata"].get("labels") or {}).get(label) == value for n in items)


def upgrade(kube: Kube, driver: str) -> None:
    """The admin's change, and the reconciler's Module update it causes (in place)."""
    kube.request(
        "PATCH",
        path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL, name=driver),
        body={"spec": {"kernelModule": {"version": NEW_VERSION}}},
        content_type=MERGE_PATCH,
    )
    kube.request(
        "PATCH",
        path(KMM_GROUP, KMM_VERSION, KMM_PLURAL, namespace=NAMESPACE, name=f"{driver}-gpu"),
        body={"spec": {"moduleLoader": {"container": {"version": NEW}}}},
        content_type=MERGE_PATCH,
    )


def reactions(counting: CountingKube, nodes: list[str]) -> Timings:
    delays = []
    ordered = sorted(nodes)
    for previous, following in itertools.pairwise(ordered):
        delays.append(counting.labelled_at[following] - counting.done_at[previous])
    return Timings("delay Done -> next label", tuple(delays))


def run(
    *,
    kube: Kube,
    admin: Any,
    fleet: KmmFleet,
    driver: str,
    nodes: int,
    poll: float | None,
    now: datetime.datetime,
) -> tuple[Timings, Counter[str], float]:
    """One rollout; (reaction delays, its API requests by kind, seconds for the whole
    rollout)."""
    names_ = set_up(kube, driver, nodes, now=now, admin=admin, fleet=fleet)
    selector = f"bench={driver}"
    module = f"{driver}-gpu"
    labels = kmm_labels(NAMESPACE, module)
    wait_for(
        "KMM loads the old version", lambda: all_in(kube, selector, labels.version_ready, OLD), 300
    )
    counting = CountingKube(Kube(admin), labels.version)
    events = EventRecorder(
        counting, "default", "gpuctl-coordinator", lambda: timestamps.format_seconds(now)
    )
    stop = threading.Event()
    view: WatchedView | RelistingView
    controller: RolloutController
    agents = InstantAgents(fleet.kmm, module)
    if poll is None:
        holder: list[RolloutController] = []
        view = WatchedView(counting, lambda _k, _o: holder[0].changed() if holder else None)
        controller = RolloutController(
            counting,
            view,
            agents=agents,
            events=events,
            config=RolloutConfig(NAMESPACE),
            wall_clock=lambda: datetime.datetime.now(datetime.UTC),
            metrics=RolloutMetrics(CollectorRegistry()),
        )
        holder.append(controller)
        threading.Thread(target=controller.run, args=(stop,), daemon=True).start()
    else:
        view = RelistingView(counting, selector)
        controller = RolloutController(
            counting,
            view,
            agents=agents,
            events=events,
            config=RolloutConfig(NAMESPACE),
            wall_clock=lambda: datetime.datetime.now(datetime.UTC),
        )

        def poll_loop() -> None:
            while not stop.wait(poll):
                controller.sync(driver)

        threading.Thread(target=poll_loop, daemon=True).start()
    try:
        wait_for(
            "the old version marked Done",
            lambda: all_in(kube, selector, names.STATE_LABEL, "Done"),
            600,
        )
        counting.reset()
        started = time.perf_counter()
        upgrade(kube, driver)
        wait_for(
            "every node Done at the new version",
            lambda: len(counting.done_at) == nodes,
            3600,
        )
        elapsed = time.perf_counter() - started
    finally:
        stop.set()
        if isinstance(view, WatchedView):
            view.stop.set()
    return reactions(counting, names_), counting.by_kind(), elapsed


def per_node_line(kinds: Counter[str], nodes: int) -> str:
    """ "PATCH nodes 7.0, GET pods 3.0, …", most first."""
    return ", ".join(f"{kind} {count / nodes:.1f}" for kind, count in kinds.most_common())


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--baseline-nodes", type=int, default=20)
    parser.add_argument("--poll", type=float, default=1.0, help="baseline poll interval (s)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gpuctl-bench-rollout-"))
    now = datetime.datetime.now(datetime.UTC)
    control_plane, cluster = start_cluster(
        root / "cluster", repository_root(), os.environ, now, die_with_parent=True
    )
    try:
        with cluster.admin_client() as admin:
            kube = Kube(admin)
            kube.request(
                "POST", path("", "v1", "namespaces"), body={"metadata": {"name": NAMESPACE}}
            )
            with KmmFleet(cluster.admin_client(), cluster.kubeconfig, NAMESPACE, root) as fleet:
                fleet.publish(IMAGE, NEW_VERSION)
                subject, subject_kinds, subject_seconds = run(
                    kube=kube,
                    admin=admin,
                    fleet=fleet,
                    driver="watched",
                    nodes=args.nodes,
                    poll=None,
                    now=now,
                )
                baseline, baseline_kinds, baseline_seconds = run(
                    kube=kube,
                    admin=admin,
                    fleet=fleet,
                    driver="polled",
                    nodes=args.baseline_nodes,
                    poll=args.poll,
                    now=now,
                )
        baseline = Timings(f"relist every {args.poll:g}s", baseline.seconds)
        subject = Timings("watch-driven engine", subject.seconds)
        polls_per_node = baseline.median / args.poll
        subject_requests = sum(subject_kinds.values()) / args.nodes
        baseline_requests = sum(baseline_kinds.values()) / args.baseline_nodes
        print(f"rollout of {args.nodes} nodes, KMM's own operator, agents instant, one machine:")
        print(
            f"  {subject.label}: median {subject.median * 1e3:.0f} ms, "
            f"p99 {subject.percentile(99) * 1e3:.0f} ms between one node Done and the next "
            f"node's version label; {subject_requests:.1f} API requests per node; "
            f"{subject_seconds:.0f} s in all"
        )
        print(
            f"  baseline ({args.baseline_nodes} nodes, {baseline.label}): median "
            f"{baseline.median * 1e3:.0f} ms, p99 {baseline.percentile(99) * 1e3:.0f} ms; "
            f"{baseline_requests:.1f} API requests per node; {baseline_seconds:.0f} s in all"
        )
        print(f"  {ratio_line(subject, baseline)}")
        request_ratio = subject_requests / baseline_requests
        print(f"  API requests per node, engine / baseline: {request_ratio:.2f}")
        print(f"  the engine's requests per node: {per_node_line(subject_kinds, args.nodes)}")
        field = polls_per_node * 120.0
        print(
            f"  reference: a 120 s poll needs the same {polls_per_node:.1f} polls per node: "
            f"~{field:.0f} s per node; ratio engine / 120 s poll: {subject.median / field:.5f}"
        )
    finally:
        control_plane.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
