"""The rollout controller's I/O around the pure decision, against the in-memory API server
(tests/support/memory_api.py) and agents that answer at once (real concurrent Futures)."""

from __future__ import annotations

import concurrent.futures
import copy
from typing import Any

from coordinator.kube.client import KubeError, path
from coordinator.kube.events import EventRecorder
from coordinator.rollout.act import CONFLICT_RETRY_SECONDS
from coordinator.rollout.config import RolloutConfig
from coordinator.rollout.controller import (
    PASS_REST_MAX_SECONDS,
    WALL_CLOCK_RECHECK_SECONDS,
    RolloutController,
    pass_rest,
)
from coordinator.rollout.status_writes import PROGRESS_SPACING_SECONDS
from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from gpuctl.common import names
from gpuctl.gpudriver.module_spec import kmm_version
from gpuctl.rollout.actions import RestoreRevision
from gpuctl.rollout.event_notes import EventNote
from gpuctl.rollout.input.build import kmm_labels
from gpuctl.rollout.input.gpu_pod_watch import watched_part
from gpuctl.rollout.input.image_probe import is_probe_pod
from gpuctl.rollout.input.kmm_boots import configured_kernel, loaded_boot
from gpuctl.rollout.step.writes import EVICT_RETRY_SECONDS
from tests.support import samples
from tests.support.clock import ManualClock
from tests.support.memory_api import MemoryApi
from tests.support.probing_api import ProbingApi
from tests.support.rollout_samples import NOT_ENFORCING

OLD, NEW = "v6.17.13.62_260409.8", "v7.1.4.6_260728.7"
NS = samples.NAMESPACE
DRIVER = "gpu"
MODULE = f"{DRIVER}-gpu"
LABELS = kmm_labels(NS, MODULE)
NODE_PATH = "/api/v1/nodes/n1"
DRIVER_PATH = f"/apis/gpuctl.dev/v1alpha1/gpudrivers/{DRIVER}"
PODS_PATH = "/api/v1/pods"
PF = "0000:03:00.0"


class Agents:
    """Answers at once with the node's module at `loaded` (None: not loaded); `reachable`
    False: no answer at all."""

    def __init__(self) -> None:
        self.loaded: str | None = OLD
        self.reachable = True
        self.asked: list[str] = []
        self.holders: list[str] = []  # modules holding xe (xe_compat of the backport)
        self.prepares: list[agent_pb.PrepareRequest] = []

    def _done(self, value: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if self.reachable:
            future.set_result(value)
        else:
            future.set_exception(TimeoutError())
        return future

    def request_report(
        self, node: str, timeout: float
    ) -> concurrent.futures.Future[report_pb.NodeReport]:
        self.asked.append("report")
        report = report_pb.NodeReport(node_name=node, kernel_trust=NOT_ENFORCING)
        if self.loaded is None:
            report.devices.add(pci_address=PF, driver="")
            report.module.state = report_pb.Module.NOT_LOADED
            return self._done(report)
        report.devices.add(pci_address=PF, driver="xe")
        report.module.state = report_pb.Module.LIVE
        report.module.backport_tag = f"xeb_{self.loaded}"
        if self.holders:
            report.module.holders.extend(self.holders)
            report.blockers.add(
                reason=report_pb.Blocker.MODULE_HOLDERS,
                message=f"xe is held by {', '.join(self.holders)}: unload it first",
            )
        return self._done(report)

    def request_prepare(
        self, node: str, request: agent_pb.PrepareRequest, timeout: float
    ) -> concurrent.futures.Future[agent_pb.PrepareResult]:
        self.asked.append("prepare")
        self.prepares.append(request)
        ready = not self.holders  # a holder blocks, whatever modulesLoadingOrder says
        return self._done(agent_pb.PrepareResult(request_id=request.request_id, ready=ready))

    def request_restore(
        self, node: str, request: agent_pb.RestoreRequest, timeout: float
    ) -> concurrent.futures.Future[agent_pb.RestoreResult]:
        self.asked.append("restore")
        return self._done(agent_pb.RestoreResult(request_id=request.request_id))


class View:
    """The watch caches: the API's objects; the Module asks for the GPUDriver's KMM version
    (as the drivers controller writes it); `claims_unknown` says why claims cannot be read."""

    def __init__(self, api: MemoryApi) -> None:
        self.api = api
        self.claims_unknown = ""
        # The Pod watch's view of the node's pods (None: untrusted, the controller lists).
        self.watched_pods: list[dict[str, Any]] | None = None
        # KMM's ModuleImagesConfig; None: one that has found every image the spec maps.
        self.images_config: dict[str, Any] | None = None

    def drivers(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(self.api.objects[DRIVER_PATH])]

    def nodes(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(self.api.objects[NODE_PATH])]

    def claims(self) -> list[dict[str, Any]]:
        return []

    def claims_trouble(self) -> str:
        return self.claims_unknown

    def claims_served(self) -> bool:
        return True

    def pods_on(self, node: str) -> list[dict[str, Any]] | None:
        if self.watched_pods is None:
            return None
        # the image probes the rollout made (gpuctl/rollout/step/kernel_proof.py), as the watch has
        # them
        probes = [
            watched_part(pod)
            for pod in self.api.objects.values()
            if is_probe_pod(pod) and pod["spec"]["nodeName"] == node
        ]
        return self.watched_pods + probes

    def images_trouble(self) -> str:
        return ""

    def module_images(self, namespace: str, name: str) -> dict[str, Any] | None:
        if self.images_config is not None:
            return self.images_config
        mappings = self.api.objects[DRIVER_PATH]["spec"]["kernelModule"].get("kernelMappings")
        found = [{"image": m.get("containerImage"), "status": "Exists"} for m in mappings or []]
        return {"status": {"imagesStates": found}}

    def kmm_boot_id(self, node: str, namespace: str, module: str) -> str | None:
        return loaded_boot(self.api.objects.get(nmc_path(node)), namespace, module)

    def kmm_kernel(self, node: str, namespace: str, module: str) -> str | None:
        return configured_kernel(self.api.objects.get(nmc_path(node)), namespace, module)

    def module(self, namespace: str, name: str) -> dict[str, Any] | None:
        spec = self.api.objects[DRIVER_PATH]["spec"]
        return {
            "metadata": {"name": name},
            "spec": {"moduleLoader": {"container": {"version": kmm_version(spec)}}},
        }


def nmc_path(node: str) -> str:
    return path(names.KMM_GROUP, names.KMM_VERSION, names.KMM_NODE_CONFIG_PLURAL, name=node)


def kmm_loads_in_boot(api: MemoryApi, node: str, boot: str) -> None:
    """KMM's NodeModulesConfig of `node` as KMM writes it once its loader succeeded."""
    entry = {"namespace": NS, "name": f"{DRIVER}-gpu", "bootId": boot}
    api.objects[nmc_path(node)] = {"metadata": {"name": node}, "status": {"modules": [entry]}}


def target(api: MemoryApi) -> str:
    """The version the rollout takes nodes to: the Module's KMM version of the GPUDriver."""
    return kmm_version(api.objects[DRIVER_PATH]["spec"])


def world(
    *,
    agents: Agents | None = None,
    pods: list[dict[str, Any]] | None = None,
    loading_order: list[str] | None = None,
    rollout: dict[str, Any] | None = None,
) -> tuple[MemoryApi, RolloutController, ManualClock]:
    # the reload's image probe ends at once (gpuctl/rollout/step/kernel_proof.py)
    api = ProbingApi()
    spec = samples.minimal_spec()
    spec["kernelModule"]["version"] = NEW
    if loading_order is not None:
        spec["kernelModule"]["modulesLoadingOrder"] = loading_order
    spec["nodeSelector"] = {"gpu": "yes"}
    spec["rollout"] = {"holdAfterFirstNode": False, "evictGPUPods": True, **(rollout or {})}
    api.objects[DRIVER_PATH] = samples.driver(DRIVER, spec)
    node = samples.node("n1", {"kubernetes.io/arch": "amd64", "gpu": "yes"})
    node["metadata"]["labels"].update(
        {
            names.TARGET_LABEL: DRIVER,
            LABELS.version: OLD,
            LABELS.ready: "",
            LABELS.version_ready: OLD,
        }
    )
    node["metadata"]["resourceVersion"] = "50"
    node["status"] = {
        "conditions": [{"type": "Ready", "status": "True"}],
        "nodeInfo": {"kernelVersion": "6.8.0-40-generic"},
    }
    api.objects[NODE_PATH] = node
    api.objects[PODS_PATH] = {"items": pods or []}
    clock = ManualClock()
    controller = RolloutController(
        api,
        View(api),
        agents=agents or Agents(),
        events=EventRecorder(api, "default", "test", lambda: "2026-11-29T12:00:00Z"),
        config=RolloutConfig(NS),
        wall_clock=clock.wall,
        monotonic=clock,
    )
    return api, controller, clock


def phase(api: MemoryApi) -> str:
    return str(api.objects[NODE_PATH]["metadata"]["labels"].get(names.STATE_LABEL, ""))


def test_a_node_goes_from_pending_to_done_through_real_writes() -> None:
    agents = Agents()
    api, controller, clock = world(agents=agents)
    seen = []
    for _ in range(12):
        controller.sync(DRIVER)
        seen.append(phase(api))
        if phase(api) == "Loading":
            labels = api.objects[NODE_PATH]["metadata"]["labels"]
            assert labels[LABELS.version] == target(api)
            assert labels[names.TARGET_LABEL] == DRIVER
            labels[LABELS.version_ready] = target(api)  # KMM loaded it
            agents.loaded = NEW
        clock.advance(1.5)
    steps = [p for i, p in enumerate(seen) if i == 0 or seen[i - 1] != p]
    assert steps == ["Pending", "Checking", "Draining", "Preparing", "Loading", "Verifying", "Done"]
    assert agents.asked.count("report") == 3  # checking, preparing, verifying: each fresh
    node = api.objects[NODE_PATH]
    assert not node.get("spec", {}).get("unschedulable")
    assert names.CORDONED_BY_GPUCTL not in node["metadata"].get("annotations", {})
    status = api.objects[DRIVER_PATH]["status"]["rollout"]
    assert status["state"] == "Complete"
    assert status["progress"] == "1/1"
    node_events = [
        o
        for p, o in api.objects.items()
        if "/events/" in p and o["involvedObject"]["kind"] == "Node"
    ]
    assert {e["reason"] for e in node_events} >= {
        "RolloutChecking",
        "RolloutLoading",
        "RolloutDone",
    }


def run_until_settled(
    api: MemoryApi, controller: RolloutController, clock: ManualClock
) -> list[str]:
    """The node's phases over a few passes (each new one once)."""
    seen: list[str] = []
    for _ in range(8):
        controller.sync(DRIVER)
        if not seen or seen[-1] != phase(api):
            seen.append(phase(api))
        clock.advance(1.5)
    return seen


def test_a_holder_listed_in_modules_loading_order_blocks_before_any_cordon() -> None:
    # KMM removes xe first, the rest of modulesLoadingOrder after it: xe_compat still holds
    # xe then, so its unload would fail with EBUSY. The node is blocked, saying why.
    agents = Agents()
    agents.holders = ["xe_compat"]
    api, controller, clock = world(
        agents=agents, loading_order=["xe", "xe_compat"], rollout={"unbindIdleDevices": True}
    )
    seen = run_until_settled(api, controller, clock)
    assert seen[-1] == "Blocked", seen
    assert "Draining" not in seen, seen
    assert agents.prepares == []
    reason = api.objects[NODE_PATH]["metadata"]["annotations"][names.REASON]
    assert "KMM removes xe first" in reason
    assert "unload it first, or fix the order" in reason


def test_a_holder_not_in_modules_loading_order_blocks_before_any_cordon() -> None:
    agents = Agents()
    agents.holders = ["xe_compat"]
    api, controller, clock = world(agents=agents)
    seen = run_until_settled(api, controller, clock)
    assert seen[-1] == "Blocked", seen
    assert "Draining" not in seen, seen
    annotations = api.objects[NODE_PATH]["metadata"]["annotations"]
    assert annotations[names.REASON] == "xe is held by xe_compat: unload it first"


def test_a_write_conflict_stops_the_pass_and_asks_for_another_soon() -> None:
    api, controller, _clock = world()
    api.fail[("PATCH", NODE_PATH)] = KubeError(409, "Conflict")
    assert controller.sync(DRIVER) == CONFLICT_RETRY_SECONDS
    assert phase(api) == ""


class LaggingView(View):
    """A watch cache that never catches up: always the Node as it was at the start."""

    def __init__(self, api: MemoryApi) -> None:
        super().__init__(api)
        self.stale = copy.deepcopy(api.objects[NODE_PATH])

    def nodes(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(self.stale)]


def test_our_own_write_is_seen_by_the_next_pass_before_the_cache_has_it() -> None:
    api, _controller, clock = world()
    controller = RolloutController(
        api,
        LaggingView(api),
        agents=Agents(),
        events=EventRecorder(api, "default", "test", lambda: "2026-11-29T12:00:00Z"),
        config=RolloutConfig(NS),
        wall_clock=clock.wall,
    )
    controller.sync(DRIVER)
    assert phase(api) == "Pending"
    controller.sync(DRIVER)
    # Decided on the node as written (Pending), not as the cache has it (no state): started.
    assert phase(api) == "Checking"
    assert [w for w in api.writes if w == ("PATCH", NODE_PATH)] == [("PATCH", NODE_PATH)] * 2


class DriverLaggingView(View):
    """A watch cache whose GPUDriver stays as it was at the start (its status never arrives)."""

    def __init__(self, api: MemoryApi) -> None:
        super().__init__(api)
        self.stale = copy.deepcopy(api.objects[DRIVER_PATH])

    def drivers(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(self.stale)]


def test_a_status_the_cache_has_not_caught_up_with_is_not_written_again() -> None:
    """Three passes deciding the same status while the cache lags the first write: one status
    write; a status that changes is written at once; after the settle time the cache decides."""
    agents = Agents()
    agents.reachable = False
    api, _controller, clock = world(agents=agents)
    view = DriverLaggingView(api)
    controller = RolloutController(
        api,
        view,
        agents=agents,
        events=EventRecorder(api, "default", "test", lambda: "2026-11-29T12:00:00Z"),
        config=RolloutConfig(NS),
        wall_clock=clock.wall,
        monotonic=clock,
    )
    status_path = f"{DRIVER_PATH}/status"

    def status_writes() -> int:
        return sum(1 for w in api.writes if w == ("PATCH", status_path))

    for _ in range(3):  # Pending, then Checking (waiting for the agent's report)
        clock.advance(PROGRESS_SPACING_SECONDS)  # each step's progress written as it comes
        controller.sync(DRIVER)
    assert phase(api) == "Checking"
    written = api.objects[DRIVER_PATH]["status"]["rollout"]
    assert written["nodes"][0]["phase"] == "Checking"
    before = status_writes()
    for _ in range(3):
        controller.sync(DRIVER)
    assert api.objects[DRIVER_PATH]["status"]["rollout"] == written  # decided the same
    assert status_writes() == before
    clock.advance(61)  # no report within the check timeout: the node Blocked, a new status
    controller.sync(DRIVER)
    assert phase(api) == "Blocked"
    assert status_writes() == before + 1
    clock.advance(5)  # the settle time: the stale cache (no status at all) decides again
    controller.sync(DRIVER)
    assert status_writes() == before + 2


def test_gpu_pods_are_evicted_and_a_pdb_refusal_is_retried() -> None:
    pod = {
        "metadata": {"namespace": "ml", "name": "train"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"gpu.intel.com/xe": "1"}}}]},
        "status": {"phase": "Running"},
    }
    api, controller, clock = world(pods=[pod])
    eviction = "/api/v1/namespaces/ml/pods/train/eviction"
    api.fail[("POST", eviction)] = KubeError(429, "TooManyRequests")
    for _ in range(10):
        controller.sync(DRIVER)
        clock.advance(1.5)
    assert phase(api) == "Draining"
    assert ("POST", eviction) in api.writes
    assert api.writes.count(("POST", eviction)) >= 2  # refused by the PDB, then asked again


def test_a_refused_eviction_is_asked_again_only_after_the_retry_interval() -> None:
    pod = {
        "metadata": {"namespace": "ml", "name": "train"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"gpu.intel.com/xe": "1"}}}]},
        "status": {"phase": "Running"},
    }
    api, controller, clock = world(pods=[pod])
    eviction = "/api/v1/namespaces/ml/pods/train/eviction"
    api.fail[("POST", eviction)] = KubeError(429, "TooManyRequests")
    for _ in range(100):
        if phase(api) == "Draining":
            break
        controller.sync(DRIVER)
        clock.advance(0.1)
    assert phase(api) == "Draining"
    asked = api.writes.count(("POST", eviction))
    for _ in range(15):  # passes caused by other changes, 1.5 s in all
        controller.sync(DRIVER)
        clock.advance(0.1)
    assert api.writes.count(("POST", eviction)) - asked <= 1
    clock.advance(EVICT_RETRY_SECONDS)
    before = api.writes.count(("POST", eviction))
    controller.sync(DRIVER)
    assert api.writes.count(("POST", eviction)) == before + 1


def test_without_agents_a_node_is_never_labelled() -> None:
    agents = Agents()
    agents.reachable = False
    api, controller, clock = world(agents=agents)
    for _ in range(50):
        controller.sync(DRIVER)
        clock.advance(2)
    assert phase(api) == "Blocked"
    node = api.objects[NODE_PATH]
    assert node["metadata"]["labels"][LABELS.version] == OLD
    assert node["metadata"]["annotations"][names.STATE_VERSION] == target(api)
    assert "no fresh agent report within 60s" in node["metadata"]["annotations"][names.REASON]


def test_a_conflicting_newer_gpudriver_never_touches_the_nodes() -> None:
    api, _controller, clock = world()
    older = samples.driver("older", samples.minimal_spec(), created="2026-01-01T00:00:00Z")
    older["spec"]["nodeSelector"] = {"gpu": "yes"}
    api.objects["/apis/gpuctl.dev/v1alpha1/gpudrivers/older"] = older

    class BothDrivers(View):
        def drivers(self) -> list[dict[str, Any]]:
            return [copy.deepcopy(api.objects[DRIVER_PATH]), copy.deepcopy(older)]

    rival = RolloutController(
        api,
        BothDrivers(api),
        agents=Agents(),
        events=EventRecorder(api, "default", "test", lambda: "2026-11-29T12:00:00Z"),
        config=RolloutConfig(NS),
        wall_clock=clock.wall,
    )
    assert rival.sync(DRIVER) is None
    assert phase(api) == ""
    assert ("PATCH", NODE_PATH) not in api.writes
    status = api.objects[DRIVER_PATH]["status"]["rollout"]
    assert "GPUDriver older already loads the driver" in status["message"]


def with_rival(api: MemoryApi, clock: ManualClock, agents: Agents) -> RolloutController:
    """A controller that also sees an older GPUDriver whose selector overlaps this one's."""
    older = samples.driver("older", samples.minimal_spec(), created="2026-01-01T00:00:00Z")
    older["spec"]["nodeSelector"] = {"gpu": "yes"}

    class BothDrivers(View):
        def drivers(self) -> list[dict[str, Any]]:
            return [copy.deepcopy(api.objects[DRIVER_PATH]), copy.deepcopy(older)]

    return RolloutController(
        api,
        BothDrivers(api),
        agents=agents,
        events=EventRecorder(api, "default", "test", lambda: "2026-11-29T12:00:00Z"),
        config=RolloutConfig(NS),
        wall_clock=clock.wall,
        monotonic=clock,
    )


def pass_until(
    api: MemoryApi, controller: RolloutController, clock: ManualClock, agents: Agents, end: str
) -> list[str]:
    """Passes (KMM loading the node once it is labelled at the target) until the node is in
    phase `end`; the phases seen, each new one once."""
    seen: list[str] = []
    for _ in range(20):
        controller.sync(DRIVER)
        if phase(api) == "Loading":
            api.objects[NODE_PATH]["metadata"]["labels"][LABELS.version_ready] = target(api)
            agents.loaded = NEW
        if not seen or seen[-1] != phase(api):
            seen.append(phase(api))
        if phase(api) == end:
            return seen
        clock.advance(1.5)
    raise AssertionError(f"never {end}: {seen}")


def test_a_node_mid_step_finishes_it_when_its_gpudriver_turns_into_a_conflict() -> None:
    agents = Agents()
    api, controller, clock = world(agents=agents)
    pass_until(api, controller, clock, agents, "Draining")
    assert api.objects[NODE_PATH]["spec"]["unschedulable"] is True
    refused = with_rival(api, clock, agents)
    seen = pass_until(api, refused, clock, agents, "Done")
    assert seen == ["Preparing", "Loading", "Verifying", "Done"]
    node = api.objects[NODE_PATH]
    assert node["metadata"]["labels"][LABELS.version] == target(api)
    assert not node["spec"].get("unschedulable")  # finished: uncordoned, not stranded
    refused.sync(DRIVER)
    status = api.objects[DRIVER_PATH]["status"]["rollout"]
    assert status["state"] == "Paused"
    assert (
        status["message"] == "no rollout: GPUDriver older already loads the driver on these nodes"
    )
    events = [o for p, o in api.objects.items() if "/events/" in p]
    assert [e["reason"] for e in events].count("InvalidRollout") == 1


def test_a_refused_rollout_names_the_nodes_it_finishes_and_starts_none() -> None:
    agents = Agents()
    api, controller, clock = world(agents=agents)
    pass_until(api, controller, clock, agents, "Checking")
    refused = with_rival(api, clock, agents)
    refused.sync(DRIVER)
    status = api.objects[DRIVER_PATH]["status"]["rollout"]
    assert status["message"] == (
        "no rollout: GPUDriver older already loads the driver on these nodes; finishing the "
        "step already begun on n1 (Checking); no other node starts"
    )
    api2, _controller2, clock2 = world(agents=agents)
    pending = with_rival(api2, clock2, agents)
    for _ in range(5):
        pending.sync(DRIVER)
        clock2.advance(1.5)
    assert phase(api2) == ""  # never started
    assert ("PATCH", NODE_PATH) not in api2.writes


def test_an_unreadable_rollout_spec_finishes_the_step_by_the_last_readable_settings() -> None:
    agents = Agents()
    api, controller, clock = world(agents=agents)
    pass_until(api, controller, clock, agents, "Draining")
    api.objects[DRIVER_PATH]["spec"]["rollout"]["timeouts"] = {"check": "soon"}
    seen = pass_until(api, controller, clock, agents, "Done")
    assert seen[-1] == "Done"
    status = api.objects[DRIVER_PATH]["status"]["rollout"]
    assert status["state"] == "Paused"
    assert status["message"].startswith("spec.rollout.timeouts.check")


def run_removal(
    api: MemoryApi, controller: RolloutController, clock: ManualClock, agents: Agents
) -> list[str]:
    """Passes until the node left the rollout; KMM unloads once the labels are gone."""
    seen: list[str] = []
    for _ in range(20):
        controller.sync(DRIVER)
        labels = api.objects[NODE_PATH]["metadata"]["labels"]
        if phase(api) == "Loading" and names.TARGET_LABEL not in labels:
            assert LABELS.version not in labels
            for kmm_label in (LABELS.ready, LABELS.version_ready):
                labels.pop(kmm_label, None)  # KMM unloaded it
            agents.loaded = None
        if not seen or seen[-1] != phase(api):
            seen.append(phase(api))
        if phase(api) == "" and len(seen) > 1:
            break
        clock.advance(1.5)
    return seen


REMOVAL_STEPS = ["Pending", "Checking", "Draining", "Preparing", "Loading", "Verifying", ""]


def assert_left(api: MemoryApi) -> None:
    node = api.objects[NODE_PATH]
    assert not node.get("spec", {}).get("unschedulable")
    annotations = node["metadata"].get("annotations", {})
    assert not {k for k in annotations if k.startswith("gpuctl.dev/")}, annotations
    assert names.STATE_LABEL not in node["metadata"]["labels"]


def test_a_node_leaving_the_selector_is_unloaded_through_the_checks_and_leaves() -> None:
    agents = Agents()
    api, controller, clock = world(agents=agents)
    api.objects[DRIVER_PATH]["spec"]["nodeSelector"] = {"gpu": "elsewhere"}
    assert run_removal(api, controller, clock, agents) == REMOVAL_STEPS
    assert agents.asked.count("report") == 3  # checking, preparing, verifying: each fresh
    assert_left(api)
    controller.sync(DRIVER)
    status = api.objects[DRIVER_PATH]["status"]["rollout"]
    assert (status["state"], status["total"]) == ("NoNodes", 0)
    assert status["message"] == f"no node is wanted for {target(api)}"
    reasons = {o["reason"] for p, o in api.objects.items() if "/events/" in p}
    assert "RolloutRemoved" in reasons


def test_a_deleted_gpudriver_unloads_its_nodes_and_then_says_nothing() -> None:
    agents = Agents()
    api, controller, clock = world(agents=agents)
    driver = api.objects[DRIVER_PATH]
    driver["metadata"]["deletionTimestamp"] = "2026-11-29T12:00:00Z"
    driver["metadata"]["finalizers"] = [names.FINALIZER]
    controller.sync(DRIVER)
    status = api.objects[DRIVER_PATH]["status"]["rollout"]
    assert (status["targetVersion"], status["state"]) == (names.REMOVAL_VERSION, "Progressing")
    assert run_removal(api, controller, clock, agents)[-1] == ""
    assert_left(api)
    controller.sync(DRIVER)  # the pass the node's last write wakes
    assert not api.objects[DRIVER_PATH]["status"].get("rollout")


def test_a_node_whose_kernel_no_mapping_serves_is_unloaded() -> None:
    agents = Agents()
    api, controller, clock = world(agents=agents)
    mappings = api.objects[DRIVER_PATH]["spec"]["kernelModule"]["kernelMappings"]
    mappings[0]["regexp"] = "^5[.]"
    assert run_removal(api, controller, clock, agents) == REMOVAL_STEPS


def test_claims_that_cannot_be_read_block_the_node_never_read_as_none() -> None:
    api, _controller, clock = world()
    view = View(api)
    view.claims_unknown = "resourceclaims.resource.k8s.io/v1 is not served: 404"
    controller = RolloutController(
        api,
        view,
        agents=Agents(),
        events=EventRecorder(api, "default", "test", lambda: "2026-11-29T12:00:00Z"),
        config=RolloutConfig(NS),
        wall_clock=clock.wall,
    )
    seen = run_until_settled(api, controller, clock)
    assert seen[-1] == "Blocked", seen
    reason = api.objects[NODE_PATH]["metadata"]["annotations"][names.REASON]
    assert reason == (
        "cannot tell whether GPU ResourceClaims are allocated on the node: "
        "resourceclaims.resource.k8s.io/v1 is not served: 404"
    )
    assert api.objects[NODE_PATH]["metadata"]["labels"][LABELS.version] == OLD


def test_a_done_node_that_reboots_is_verified_again_with_a_warning_event() -> None:
    agents = Agents()
    api, controller, clock = world(agents=agents)
    info = api.objects[NODE_PATH]["status"]["nodeInfo"]
    info["bootID"] = "boot-1"
    for _ in range(12):
        controller.sync(DRIVER)
        if phase(api) == "Loading":
            api.objects[NODE_PATH]["metadata"]["labels"][LABELS.version_ready] = target(api)
            kmm_loads_in_boot(api, "n1", "boot-1")
            agents.loaded = NEW
        clock.advance(1.5)
    assert phase(api) == "Done"
    annotations = api.objects[NODE_PATH]["metadata"]["annotations"]
    assert '"bootID":"boot-1"' in annotations[names.VERIFIED_BOOT]
    # The kubelet's status update after the reboot: a new boot id and resourceVersion.
    api.objects[NODE_PATH]["status"]["nodeInfo"]["bootID"] = "boot-2"
    meta = api.objects[NODE_PATH]["metadata"]
    meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
    controller.sync(DRIVER)
    assert phase(api) == "Verifying"
    assert api.objects[NODE_PATH]["spec"]["unschedulable"] is True
    [event] = [
        o
        for p, o in api.objects.items()
        if "/events/" in p and o["reason"] == "RolloutVerifying" and o["type"] == "Warning"
    ]
    assert "rebooted (boot boot-1 -> boot-2" in event["message"]


def rollback_to(revision: dict[str, Any]) -> RestoreRevision:
    note = '{"from": "' + NEW + '", "to": "' + OLD + '"}'
    return RestoreRevision(revision, note, EventNote("Warning", "RolledBack", "rolled back"))


def test_a_rollback_git_owns_writes_the_record_only_and_only_on_the_driver_decided_on() -> None:
    api, controller, _ = world()
    revision = copy.deepcopy(api.objects[DRIVER_PATH]["spec"]["kernelModule"])
    decided_on = copy.deepcopy(api.objects[DRIVER_PATH])
    decided_on["metadata"]["resourceVersion"] = "7"
    stored = api.objects[DRIVER_PATH]
    stored["metadata"]["annotations"] = {"argocd.argoproj.io/tracking-id": "gpu:gpuctl.dev/x"}
    # Changed since the decision read it (another resourceVersion): nothing is written, and
    # the next pass decides again.
    stored["metadata"]["resourceVersion"] = "8"
    assert controller.actor.roll_back(decided_on, rollback_to(revision)) == CONFLICT_RETRY_SECONDS
    assert ("PATCH", DRIVER_PATH) not in api.writes
    # As decided on: the record alone, no spec, and the RollbackInGit Event.
    stored["metadata"]["resourceVersion"] = "7"
    assert controller.actor.roll_back(decided_on, rollback_to(revision)) is None
    patch = api.bodies[api.writes.index(("PATCH", DRIVER_PATH))]
    assert set(patch) == {"metadata"}
    assert patch["metadata"]["resourceVersion"] == "7"
    assert "Argo CD" in patch["metadata"]["annotations"][names.ROLLBACK]
    reasons = [b.get("reason") for b in api.bodies if isinstance(b, dict)]
    assert "RollbackInGit" in reasons


def test_a_rollout_waiting_days_for_its_window_is_looked_at_again_within_the_recheck() -> None:
    """The decision asks for a pass when the window opens, days away by the monotonic clock;
    the controller asks for one within WALL_CLOCK_RECHECK_SECONDS, so a wall clock that
    jumps (an NTP step) is noticed then, not days later."""
    wednesdays = [{"days": ["Wed"], "start": "02:00", "duration": "1h"}]
    api, controller, clock = world(rollout={"maintenanceWindows": wednesdays})
    again = controller.sync(DRIVER)
    status = api.objects[DRIVER_PATH]["status"]["rollout"]
    assert status["maintenanceWindow"]["open"] is False
    assert phase(api) == "Pending"
    assert again == WALL_CLOCK_RECHECK_SECONDS
    clock.advance(again)
    assert controller.sync(DRIVER) == WALL_CLOCK_RECHECK_SECONDS
    assert phase(api) == "Pending"  # still outside the window: nothing starts


def test_the_worker_rests_as_long_as_a_pass_took_and_never_longer_than_a_second() -> None:
    """Passes take at most about half the rollout loop's time; a pass that waited long (a
    server away) is not made to wait again."""
    assert pass_rest(0.0) == 0.0
    assert pass_rest(0.2) == 0.2
    assert pass_rest(30.0) == PASS_REST_MAX_SECONDS == 1.0
    assert pass_rest(-0.001) == 0.0  # a clock that stepped back
