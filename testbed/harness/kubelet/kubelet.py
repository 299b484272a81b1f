"""The kubelet of KMM's Pods: runs the image pull, sign and worker Pods of one namespace.

``KmmKubelet`` lists KMM's Pods of the namespace on every watch event about one of them and
runs each one it serves on a thread of its own. It watches and lists only KMM's Pods (one
label selector per kind below, ``SERVED_SELECTORS``), as a real kubelet is sent only its own
node's Pods: the namespace also holds the workload's Pods, and listing all of them on every
event of theirs made the stand-in cost the API server and the machine more the more the
workload churned (a drain's evictions), which a cluster's kubelets never do.

How each kind of Pod runs (image pull, sign, worker, gpuctl's image probe) is
pod_runners.py; this module is the loop: the watches, which Pods it serves, the test controls
(``serve``, ``delay_node``, ``hold_node``, ``hold_probes``) and deletions.

A worker Pod on a node whose ``Ready`` condition is not True waits (a NotReady node's kubelet
runs nothing). ``delay_node`` makes every KMM container start on a node wait (a slow pull);
``hold_probes`` holds gpuctl's image probes. A Pod being deleted has its container killed and
its phase set Failed (exit code 137), then is deleted with grace period 0, as a kubelet
confirms a deletion; finalizers stay KMM's business. A Pod's containers run on through an API
server or etcd outage, and its status is written once the API server answers again (a kubelet's
status manager keeps syncing): a status lost to a restart would leave KMM waiting on a Pod that
never ends. Every container's output is kept under ``folder/pods/<pod>-<uid>/`` (``logs``)."""

from __future__ import annotations

import datetime
import json
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from testbed.harness.kubelet import pod_status as status
from testbed.harness.kubelet import record
from testbed.harness.kubelet.catalogue import ImageCatalogue
from testbed.harness.kubelet.containers import outside
from testbed.harness.kubelet.pod_run import PodGoneError, PodRun
from testbed.harness.kubelet.pod_runners import HTTP_NOT_FOUND, PodRunners
from testbed.harness.kubelet.sign_pod import SIGN_POD_RESOURCE_TYPE
from testbed.harness.watch_wakeup import WatchWakeup

WORKER_ACTION_LABEL = "kmm.node.kubernetes.io/worker-action"
PULL_POD_LABEL = "kmm.node.kubernetes.io/pull-pod-type"
RESOURCE_TYPE_LABEL = "kmm.node.kubernetes.io/resource-type"  # KMM's build and sign Pods
# gpuctl's image probes (gpuctl/rollout/input/image_probe.py): the coordinator's Pods on a node,
# run as this kubelet runs KMM's, which a node's own kubelet runs beside them.
IMAGE_PROBE_LABEL = "gpuctl.dev/image-probe"
# The Pods served, one kind per selector (a label's existence; selectors have no "or").
SERVED_SELECTORS = (PULL_POD_LABEL, RESOURCE_TYPE_LABEL, WORKER_ACTION_LABEL, IMAGE_PROBE_LABEL)
RESYNC_SECONDS = 2.0


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class KmmKubelet(PodRunners):
    """Runs KMM's Pods of ``namespace`` on the nodes it serves (see the module docstring)."""

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        *,
        catalogue: ImageCatalogue,
        worker_binary: Path,
        folder: Path,
        backoff: status.BackOff | None = None,
        clock: Callable[[], datetime.datetime] = _now,
        kaniko_image: str = "",
        sign_image: str = "",
    ) -> None:
        self._core: Any = k8s.CoreV1Api(api_client)
        self.kaniko_image = kaniko_image
        self.sign_image = sign_image
        self.namespace = namespace
        self.catalogue = catalogue
        self._worker_binary = worker_binary
        self.folder = folder
        self.backoff = backoff or status.BackOff()
        self._clock = clock
        self.record = folder / "kernel-record.jsonl"
        self._roots: dict[str, Path] = {}
        self._kernels: dict[str, str] = {}
        self._delays: dict[str, float] = {}
        self._held: set[str] = set()
        self._probes_held: set[str] = set()
        self._runs: dict[str, PodRun] = {}
        self._lock = threading.Lock()
        self._wakeup = threading.Event()
        self._stopped = threading.Event()
        self.errors: list[BaseException] = []
        self._bin = folder / "bin"
        self._write_modprobe()
        self._watches = tuple(
            WatchWakeup(f"kmm-pods-{selector}", self._opens_watch(selector), self._wakeup.set)
            for selector in SERVED_SELECTORS
        )
        self._loop = threading.Thread(target=self._run, name="kmm-kubelet", daemon=True)

    # --- test controls -------------------------------------------------------------------

    def serve(self, node: str, root: Path, kernel_release: str) -> None:
        """Run ``node``'s worker Pods on the fake host ``root``, whose ``uname -r`` is
        ``kernel_release``."""
        with self._lock:
            self._roots[node] = root
            self._kernels[node] = kernel_release
        self._wakeup.set()

    def delay_node(self, node: str, seconds: float) -> None:
        """Every start of a KMM worker container on ``node`` from now on waits ``seconds``
        first (KMM slow there; gpuctl's image probes are not delayed)."""
        with self._lock:
            self._delays[node] = seconds

    def hold_node(self, node: str, held: bool = True) -> None:
        """While held, no KMM worker container starts on ``node`` (as KMM's image pull or
        its worker's start that takes as long as the test says; gpuctl's image probes run);
        ``held=False`` lets the waiting ones start."""
        with self._lock:
            if held:
                self._held.add(node)
            else:
                self._held.discard(node)

    def hold_probes(self, node: str, held: bool = True) -> None:
        """While held, no gpuctl image probe's container starts on ``node`` (its image slow to
        pull: the check waits for its proof); ``held=False`` lets the waiting ones start."""
        with self._lock:
            if held:
                self._probes_held.add(node)
            else:
                self._probes_held.discard(node)

    def kernel_calls(self) -> list[record.KernelCall]:
        return record.read(self.record)

    def assert_no_unload_while_busy(
        self, excused: Callable[[record.KernelCall], bool] = record.never
    ) -> None:
        record.assert_no_unload_while_busy(self.record, excused)

    def logs(self, pod: str) -> str:
        """What every container of the Pod named ``pod`` printed, run by run (all Pods of
        that name: KMM names a worker Pod the same each time)."""
        runs = sorted((self.folder / "pods").glob(f"{pod}-{'[0-9a-f]' * 8}/*.log"))
        return "".join(path.read_text(errors="replace") for path in runs)

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        for watch in self._watches:
            watch.start()
        self._loop.start()

    def stop(self) -> None:
        self._stopped.set()
        self._wakeup.set()
        for watch in self._watches:
            watch.stop()
        if self._loop.ident is not None:  # started
            self._loop.join(10)
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            run.kill()
        for run in runs:
            if run.thread is not None:
                run.thread.join(10)

    # --- the loop ------------------------------------------------------------------------

    def _record_error(self, error: BaseException) -> None:
        """Keeps ``error`` (``errors``) and its traceback (``errors.log``)."""
        self.errors.append(error)
        with (self.folder / "errors.log").open("a") as log:
            log.write("".join(traceback.format_exception(error)) + "\n")

    def _write_modprobe(self) -> None:
        self._bin.mkdir(parents=True, exist_ok=True)
        script = self._bin / "modprobe"
        python = outside(Path(sys.executable).parent) + "/" + Path(sys.executable).name
        script.write_text(f'#!/bin/sh\nexec {python} -m testbed.harness.kubelet.modprobe "$@"\n')
        script.chmod(0o755)

    def _opens_watch(self, selector: str) -> Callable[[], Any]:
        def open_watch() -> Any:
            return self._core.list_namespaced_pod(
                self.namespace,
                label_selector=selector,
                watch=True,
                timeout_seconds=300,
                _preload_content=False,
            )

        return open_watch

    def kmm_pods(self) -> list[dict[str, Any]]:
        """KMM's Pods in the namespace, each once."""
        pods: dict[str, dict[str, Any]] = {}
        for selector in SERVED_SELECTORS:
            response = self._core.list_namespaced_pod(
                self.namespace, label_selector=selector, _preload_content=False
            )
            for pod in json.loads(response.data)["items"]:
                pods[pod["metadata"]["uid"]] = pod
        return list(pods.values())

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wakeup.wait(RESYNC_SECONDS)
            self._wakeup.clear()
            if self._stopped.is_set():
                return
            try:
                self._sync()
            except Exception as error:  # the API server restarting: next pass
                self._record_error(error)

    def _sync(self) -> None:
        present = set()
        for pod in self.kmm_pods():
            uid = pod["metadata"]["uid"]
            present.add(uid)
            if pod["metadata"].get("deletionTimestamp"):
                if self._serves(pod):
                    self._confirm_deletion(pod)
                continue
            if uid in self._runs or not self._serves(pod):
                continue
            if pod.get("status", {}).get("phase") in (status.SUCCEEDED, status.FAILED):
                continue
            run = PodRun(uid)
            target = self._run_worker
            if PULL_POD_LABEL in self._labels(pod):
                target = self._run_pull
            elif IMAGE_PROBE_LABEL in self._labels(pod):
                target = self._run_probe
            elif self._is_sign(pod):
                target = self._run_sign
            run.thread = threading.Thread(
                target=self._guarded,
                args=(target, pod, run),
                daemon=True,
                name=f"pod-{pod['metadata']['name']}",
            )
            with self._lock:
                self._runs[uid] = run
            run.thread.start()
        with self._lock:
            for uid in [uid for uid in self._runs if uid not in present]:
                self._runs.pop(uid).kill()

    @staticmethod
    def _labels(pod: dict[str, Any]) -> dict[str, str]:
        return dict(pod["metadata"].get("labels") or {})

    @classmethod
    def _is_sign(cls, pod: dict[str, Any]) -> bool:
        return cls._labels(pod).get(RESOURCE_TYPE_LABEL) == SIGN_POD_RESOURCE_TYPE

    def _serves(self, pod: dict[str, Any]) -> bool:
        labels = self._labels(pod)
        if PULL_POD_LABEL in labels or self._is_sign(pod):
            return True
        node = pod["spec"].get("nodeName", "")
        with self._lock:
            kmm_or_probe = WORKER_ACTION_LABEL in labels or IMAGE_PROBE_LABEL in labels
            return kmm_or_probe and node in self._roots

    def _confirm_deletion(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        with self._lock:
            run = self._runs.get(uid)
        if run is not None:
            run.kill()
            if run.thread is not None:
                run.thread.join(10)
        if pod["metadata"].get("deletionGracePeriodSeconds") == 0:
            return
        if (pod.get("status") or {}).get("phase") not in (status.SUCCEEDED, status.FAILED):
            self._write_killed(pod)
        try:
            # In the body: an API server reading a body ignores the query's gracePeriodSeconds.
            self._core.delete_namespaced_pod(
                pod["metadata"]["name"],
                self.namespace,
                body={"gracePeriodSeconds": 0, "preconditions": {"uid": uid}},
            )
        except k8s.ApiException as error:
            if error.status not in (HTTP_NOT_FOUND, 409):
                raise

    def _write_killed(self, pod: dict[str, Any]) -> None:
        """A deleted Pod's containers killed (137) and its phase Failed, as a kubelet writes it
        before it confirms the deletion (KMM deletes a Failed worker Pod and makes it again)."""
        now = self._clock()
        killed = status.terminated(137, now, now)
        spec = pod["spec"]
        containers = [
            status.container_status(c["name"], c["image"], killed) for c in spec["containers"]
        ]
        inits = [
            status.container_status(c["name"], c["image"], killed)
            for c in spec.get("initContainers") or []
        ]
        body = status.pod_status(status.FAILED, now, containers, inits or None)
        try:
            self._core.patch_namespaced_pod_status(
                pod["metadata"]["name"], self.namespace, {"status": body}
            )
        except k8s.ApiException as error:
            if error.status != HTTP_NOT_FOUND:
                raise

    def _guarded(
        self, target: Callable[[dict[str, Any], PodRun], None], pod: dict[str, Any], run: PodRun
    ) -> None:
        try:
            target(pod, run)
        except PodGoneError:
            pass
        except Exception as error:
            if not run.stop.is_set():
                self._record_error(error)
