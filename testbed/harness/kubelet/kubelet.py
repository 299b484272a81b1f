"""The kubelet of KMM's Pods: runs the image pull, sign and worker Pods of one namespace.

``KmmKubelet`` lists KMM's Pods of the namespace on every watch event about one of them and
runs each one it serves on a thread of its own. It watches and lists only KMM's Pods (one
label selector per kind below, ``SERVED_SELECTORS``), as a real kubelet is sent only its own
node's Pods: the namespace also holds the workload's Pods, and listing all of them on every
event of theirs made the stand-in cost the API server and the machine more the more the
workload churned (a drain's evictions), which a cluster's kubelets never do.

- an image pull Pod (``kmm.node.kubernetes.io/pull-pod-type``; KMM leaves it unscheduled, so
  no node is needed) succeeds when the image is in the catalogue; otherwise its container
  waits with ``ErrImagePull``, then ``ImagePullBackOff``, and the pull is retried with the
  back-off (an image added later is found);
- a sign Pod (``kmm.node.kubernetes.io/resource-type: SignImage``, which KMM makes when a
  Module's image needs signing and leaves unscheduled) runs once (``restartPolicy: Never``):
  its container waits for its image as a pull does unless it is the kaniko image the kubelet
  was given (``kaniko_image``, KMM's ``$RELATED_IMAGE_BUILD``), waits in ``ContainerCreating``
  while a Secret it mounts is missing, then runs the Dockerfile KMM wrote as kaniko and
  ``sign-file`` would (``sign_pod``: the unsigned image from the catalogue, its modules
  signed with the Secrets' key and certificate, the result pushed to the catalogue as
  ``--destination``): Succeeded with exit code 0, or Failed with exit code 1 (an image or
  file missing, a key or certificate that does not parse or match, a Dockerfile line the
  stand-in does not understand). Its words are in its log (``logs``), as kaniko's are: the
  status carries them only under ``terminationMessagePolicy: FallbackToLogsOnError``, which
  KMM does not set;
- a worker Pod (``kmm.node.kubernetes.io/worker-action``) bound to a node the kubelet serves
  (``serve``): its init container runs KMM's copy over the image's folder (a missing image
  waits as above), then the worker container runs KMM's real ``worker`` binary with the
  node's fake host under it (``containers``, ``modprobe``). ``restartPolicy: OnFailure``: a
  failed container runs again after the crash-loop back-off (``pod_status.BackOff``; tests may
  shorten it, ``backoff=``), with ``restartCount`` and ``lastState`` as a kubelet writes them.

- gpuctl's image probe (``gpuctl.dev/image-probe``, gpuctl/rollout/input/image_probe.py) bound to a
  served node: one container, ``restartPolicy: Never``, its image pulled as the init
  container's is, its command (KMM's copy) run once over the image's folder; Succeeded with
  exit code 0, else Failed with the container's exit code (``_run_probe``).

A worker Pod on a node whose ``Ready`` condition is not True waits (a NotReady node's kubelet
runs nothing). ``delay_node`` makes every container start on a node wait (a slow pull). A Pod
being deleted has its container killed and its phase set Failed (exit code 137), then is
deleted with grace period 0, as a kubelet confirms a deletion; finalizers stay KMM's
business. A Pod's containers run on through an API server or etcd outage, and its status is
written once the API server answers again (a kubelet's status manager keeps syncing): a
status lost to a restart would leave KMM waiting on a Pod that never ends. Every container's
output is kept under ``folder/pods/<pod>-<uid>/`` (``logs``).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client as k8s

from testbed.harness.kubelet import pod_status as status
from testbed.harness.kubelet import record
from testbed.harness.kubelet.catalogue import ImageCatalogue
from testbed.harness.kubelet.containers import Mount, outside, start
from testbed.harness.kubelet.sign_pod import SIGN_POD_RESOURCE_TYPE, SignPod, VolumeNotReadyError
from testbed.harness.watch_wakeup import WatchWakeup

WORKER_ACTION_LABEL = "kmm.node.kubernetes.io/worker-action"
PULL_POD_LABEL = "kmm.node.kubernetes.io/pull-pod-type"
RESOURCE_TYPE_LABEL = "kmm.node.kubernetes.io/resource-type"  # KMM's build and sign Pods
# gpuctl's image probes (gpuctl/rollout/input/image_probe.py): the coordinator's Pods on a node,
# run as this kubelet runs KMM's, which a node's own kubelet runs beside them.
IMAGE_PROBE_LABEL = "gpuctl.dev/image-probe"
# The Pods served, one kind per selector (a label's existence; selectors have no "or").
SERVED_SELECTORS = (PULL_POD_LABEL, RESOURCE_TYPE_LABEL, WORKER_ACTION_LABEL, IMAGE_PROBE_LABEL)
FIRMWARE_CLASS_PARAMETERS = "/sys/module/firmware_class/parameters"
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
RESYNC_SECONDS = 2.0
NODE_READY_POLL_SECONDS = 0.2
HTTP_NOT_FOUND = 404
RETRIED_STATUSES = (0, 429, 500, 502, 503, 504)  # 0: no HTTP answer at all
API_RETRY_SECONDS = 0.5
REPO = Path(__file__).resolve().parents[3]
_T = TypeVar("_T")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass
class _Run:
    """One Pod the kubelet runs: its thread, the container now running, a stop signal."""

    uid: str
    thread: threading.Thread | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    process: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def kill(self) -> None:
        self.stop.set()
        with self.lock:
            if self.process is not None and self.process.poll() is None:
                # Its thread may reap it between the poll and the kill: then it is gone.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, 9)


@dataclass
class _WorkerPod:
    """A worker Pod as its kubelet tracks it: its containers' states and restarts."""

    pod: dict[str, Any]
    folder: Path
    started: datetime.datetime
    init_state: dict[str, Any] = field(default_factory=lambda: status.waiting("ContainerCreating"))
    init_last: dict[str, Any] | None = None
    init_restarts: int = 0
    main_state: dict[str, Any] = field(
        default_factory=lambda: status.waiting(status.POD_INITIALIZING)
    )
    main_last: dict[str, Any] | None = None
    main_restarts: int = 0
    volumes: dict[str, tuple[str, Path]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.volumes = _write_volumes(self.pod, self.folder)

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])

    @property
    def node(self) -> str:
        return str(self.pod["spec"]["nodeName"])

    @property
    def init(self) -> dict[str, Any]:
        return dict(self.pod["spec"]["initContainers"][0])

    @property
    def main(self) -> dict[str, Any]:
        return dict(self.pod["spec"]["containers"][0])

    def status(self, phase: str) -> dict[str, Any]:
        main = status.container_status(
            self.main["name"],
            self.main["image"],
            self.main_state,
            restarts=self.main_restarts,
            last_state=self.main_last,
        )
        init = status.container_status(
            self.init["name"],
            self.init["image"],
            self.init_state,
            restarts=self.init_restarts,
            last_state=self.init_last,
        )
        return status.pod_status(phase, self.started, [main], [init])


class PodGoneError(Exception):
    """The Pod was deleted (404 on a status write), or the kubelet is stopping."""


class KmmKubelet:
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
        self._runs: dict[str, _Run] = {}
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
        """Every container start on ``node`` from now on waits ``seconds`` first."""
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

    def kernel_calls(self) -> list[record.KernelCall]:
        return record.read(self.record)

    def assert_no_unload_while_busy(self) -> None:
        record.assert_no_unload_while_busy(self.record)

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
            run = _Run(uid)
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
        self, target: Callable[[dict[str, Any], _Run], None], pod: dict[str, Any], run: _Run
    ) -> None:
        try:
            target(pod, run)
        except PodGoneError:
            pass
        except Exception as error:
            if not run.stop.is_set():
                self._record_error(error)

    # --- Pods ----------------------------------------------------------------------------

    def _answered(self, run: _Run, call: Callable[[], _T]) -> _T:
        """``call``'s answer, asked again through an API server or etcd outage (refused
        connections, 5xx, 429) as a kubelet's status manager keeps syncing: a Pod's container
        goes on running while the API server restarts, and its status is written once it is
        back. A Pod deleted meanwhile (404, or ``run`` stopped) ends the run."""
        while True:
            if run.stop.is_set():
                raise PodGoneError
            try:
                return call()
            except k8s.ApiException as error:
                if error.status == HTTP_NOT_FOUND:
                    raise PodGoneError from error
                if error.status not in RETRIED_STATUSES:
                    raise
            except urllib3.exceptions.HTTPError:
                pass  # refused, reset or timed out: the API server is restarting
            self._sleep(run, API_RETRY_SECONDS)

    def _write_status(self, pod: dict[str, Any], run: _Run, body: dict[str, Any]) -> None:
        self._answered(
            run,
            lambda: self._core.patch_namespaced_pod_status(
                pod["metadata"]["name"], self.namespace, {"status": body}
            ),
        )

    def _sleep(self, run: _Run, seconds: float) -> None:
        if run.stop.wait(seconds):
            raise PodGoneError

    def _run_pull(self, pod: dict[str, Any], run: _Run) -> None:
        container = pod["spec"]["containers"][0]
        image = container["image"]
        started = self._clock()
        attempt = 0
        while not self.catalogue.has(image):
            reason = status.ERR_IMAGE_PULL if attempt == 0 else status.IMAGE_PULL_BACK_OFF
            waiting = status.waiting(reason, f'failed to pull image "{image}": not found')
            self._write_status(
                pod,
                run,
                status.pod_status(
                    status.PENDING,
                    started,
                    [status.container_status(container["name"], image, waiting)],
                ),
            )
            self._sleep(run, self.backoff.delay(attempt))
            attempt += 1
        done = status.terminated(0, started, self._clock())
        self._write_status(
            pod,
            run,
            status.pod_status(
                status.SUCCEEDED, started, [status.container_status(container["name"], image, done)]
            ),
        )

    def _secret(self, run: _Run, name: str) -> dict[str, Any] | None:
        """The namespace's Secret ``name`` as a volume mounts it (None: not found)."""

        def read() -> dict[str, Any] | None:
            try:
                response = self._core.read_namespaced_secret(
                    name, self.namespace, _preload_content=False
                )
            except k8s.ApiException as error:
                if error.status == HTTP_NOT_FOUND:
                    return None
                raise
            secret: dict[str, Any] = json.loads(response.data)
            return secret

        return self._answered(run, read)

    def _run_sign(self, pod: dict[str, Any], run: _Run) -> None:
        """KMM's sign Pod: its kaniko container, once (see the module docstring)."""
        container = pod["spec"]["containers"][0]
        name, image = container["name"], container["image"]
        started = self._clock()
        folder = self.folder / "pods" / f"{pod['metadata']['name']}-{run.uid[:8]}"
        sign = SignPod(pod, folder, self.catalogue, self.sign_image)

        def write(phase: str, state: dict[str, Any]) -> None:
            body = status.pod_status(phase, started, [status.container_status(name, image, state)])
            self._write_status(pod, run, body)

        attempt = 0
        while True:
            if image != self.kaniko_image:
                reason = status.ERR_IMAGE_PULL if attempt == 0 else status.IMAGE_PULL_BACK_OFF
                write(status.PENDING, status.waiting(reason, f'failed to pull image "{image}"'))
            else:
                try:
                    sign.mount(lambda secret: self._secret(run, secret))
                    break
                except VolumeNotReadyError as why:
                    write(status.PENDING, status.waiting(status.CONTAINER_CREATING, str(why)))
            self._sleep(run, self.backoff.delay(attempt))
            attempt += 1
        began = self._clock()
        write(status.RUNNING, status.running(began))
        code = sign.build()
        log = "".join(line + "\n" for line in sign.output)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.log").write_text(log)
        message = status.termination_message(container, code, log)
        finished = status.terminated(code, began, self._clock(), message)
        write(status.SUCCEEDED if code == 0 else status.FAILED, finished)

    def _run_probe(self, pod: dict[str, Any], run: _Run) -> None:
        """A one-container Pod bound to a served node, ``restartPolicy: Never`` (gpuctl's
        image probe): its image pulled as a worker's init container's is (a missing one waits
        with ``ErrImagePull``, then ``ImagePullBackOff``, pulled again after the back-off), its
        command run once over the image's folder and its volumes; Succeeded on exit code 0,
        else Failed, the container terminated with its exit code (and, under
        ``FallbackToLogsOnError``, its log's tail as the message)."""
        container = pod["spec"]["containers"][0]
        name, image, node = container["name"], container["image"], pod["spec"]["nodeName"]
        folder = self.folder / "pods" / f"{pod['metadata']['name']}-{run.uid[:8]}"
        volumes = _write_volumes(pod, folder)
        started = self._clock()

        def write(phase: str, state: dict[str, Any]) -> None:
            body = status.pod_status(phase, started, [status.container_status(name, image, state)])
            self._write_status(pod, run, body)

        attempt = 0
        while True:
            # `hold_node` holds KMM's worker containers (a test's slow KMM), not gpuctl's probe.
            self._wait_to_start(node, run, held=False)
            if self.catalogue.has(image):
                break
            reason = status.ERR_IMAGE_PULL if attempt == 0 else status.IMAGE_PULL_BACK_OFF
            write(status.PENDING, status.waiting(reason, f'failed to pull image "{image}"'))
            self._sleep(run, self.backoff.delay(attempt))
            attempt += 1
        began = self._clock()
        write(status.RUNNING, status.running(began))
        mounts = [
            Mount(entry, f"/{entry.name}")
            for entry in sorted(self.catalogue.folder(image).iterdir())
        ]
        with self._lock:
            root = self._roots[node]
        mounts += _mounts(container, volumes, root)
        log_path = folder / f"{name}.log"
        code = self._execute(
            run,
            mounts=mounts,
            argv=[*container.get("command", []), *container.get("args", [])],
            env={"PATH": SYSTEM_PATH},
            log_path=log_path,
        )
        log = log_path.read_text(errors="replace")
        message = status.termination_message(container, code, log)
        finished = status.terminated(code, began, self._clock(), message)
        write(status.SUCCEEDED if code == 0 else status.FAILED, finished)

    def _node_ready(self, node: str, run: _Run) -> bool:
        response = self._answered(run, lambda: self._core.read_node(node, _preload_content=False))
        conditions = json.loads(response.data).get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def _held_back(self, node: str) -> bool:
        with self._lock:
            return node in self._held

    def _wait_to_start(self, node: str, run: _Run, *, held: bool = True) -> None:
        """Until the node is Ready (and, for KMM's worker containers, `held`, not held back
        by `hold_node`)."""
        while (held and self._held_back(node)) or not self._node_ready(node, run):
            self._sleep(run, NODE_READY_POLL_SECONDS)
        with self._lock:
            delay = self._delays.get(node, 0.0)
        self._sleep(run, delay)

    def _run_worker(self, pod: dict[str, Any], run: _Run) -> None:
        """The init container until it succeeds, then the worker container until it does."""
        worker = _WorkerPod(
            pod, self.folder / "pods" / f"{pod['metadata']['name']}-{run.uid[:8]}", self._clock()
        )
        init = self._run_init_container(worker, run)
        self._run_worker_container(worker, run, init)

    def _write_worker(self, worker: _WorkerPod, run: _Run, phase: str) -> None:
        self._write_status(worker.pod, run, worker.status(phase))

    def _run_init_container(self, worker: _WorkerPod, run: _Run) -> dict[str, Any]:
        """KMM's copy out of the module image; returns its terminated state."""
        image = worker.init["image"]
        while True:
            self._wait_to_start(worker.node, run)
            if not self.catalogue.has(image):
                reason = (
                    status.ERR_IMAGE_PULL
                    if worker.init_restarts == 0
                    else (status.IMAGE_PULL_BACK_OFF)
                )
                worker.init_state = status.waiting(reason, f'failed to pull image "{image}"')
                self._write_worker(worker, run, status.PENDING)
                self._sleep(run, self.backoff.delay(worker.init_restarts))
                worker.init_restarts += 1
                continue
            began = self._clock()
            worker.init_state = status.running(began)
            self._write_worker(worker, run, status.PENDING)
            image_root = sorted(self.catalogue.folder(image).iterdir())
            mounts = [Mount(entry, f"/{entry.name}") for entry in image_root]
            mounts += _mounts(worker.init, worker.volumes, self._roots[worker.node])
            argv = [*worker.init.get("command", []), *worker.init.get("args", [])]
            code = self._execute(
                run,
                mounts=mounts,
                argv=argv,
                env={"PATH": SYSTEM_PATH},
                log_path=worker.folder / f"init-{worker.init_restarts}.log",
            )
            finished = status.terminated(code, began, self._clock())
            if code == 0:
                worker.init_state = finished
                return finished
            worker.init_last = finished
            worker.init_restarts += 1
            worker.init_state = status.waiting(status.CRASH_LOOP_BACK_OFF)
            self._write_worker(worker, run, status.PENDING)
            self._sleep(run, self.backoff.delay(worker.init_restarts - 1))

    def _run_worker_container(self, worker: _WorkerPod, run: _Run, init: dict[str, Any]) -> None:
        """KMM's worker binary over the node's fake host, restarted while it fails."""
        root = self._roots[worker.node]
        mounts = [*_mounts(worker.main, worker.volumes, root), _firmware_class_path(root)]
        while True:
            if worker.main_restarts:
                self._wait_to_start(worker.node, run)
            began = self._clock()
            worker.main_state = status.running(began)
            self._write_worker(worker, run, status.RUNNING)
            code = self._execute(
                run,
                mounts=mounts,
                argv=[outside(self._worker_binary), *worker.main.get("args", [])],
                env=self._worker_environment(worker.node, worker.name),
                log_path=worker.folder / f"worker-{worker.main_restarts}.log",
            )
            finished = status.terminated(code, began, self._clock())
            if code == 0:
                worker.main_state = finished
                self._write_worker(worker, run, status.SUCCEEDED)
                return
            worker.main_last = finished
            worker.main_restarts += 1
            worker.main_state = status.waiting(status.CRASH_LOOP_BACK_OFF)
            self._write_worker(worker, run, status.RUNNING)
            self._sleep(run, self.backoff.delay(worker.main_restarts - 1))

    def _worker_environment(self, node: str, pod: str) -> dict[str, str]:
        with self._lock:
            root, kernel = self._roots[node], self._kernels[node]
        return {
            "PATH": f"{outside(self._bin)}:{SYSTEM_PATH}",
            "PYTHONPATH": outside(REPO),
            "GPUCTL_KUBELET_ROOT": outside(root),
            "GPUCTL_KUBELET_KERNEL": kernel,
            "GPUCTL_KUBELET_RECORD": outside(self.record),
            "GPUCTL_KUBELET_NODE": node,
            "GPUCTL_KUBELET_POD": pod,
        }

    def _execute(
        self,
        run: _Run,
        *,
        mounts: list[Mount],
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
    ) -> int:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("wb") as log, run.lock:
            if run.stop.is_set():
                raise PodGoneError
            run.process = start(mounts, argv, env, log)
        code = int(run.process.wait())
        if run.stop.is_set():
            raise PodGoneError
        return code


def _write_volumes(pod: dict[str, Any], folder: Path) -> dict[str, tuple[str, Path]]:
    """Each volume's kind and source: downwardAPI files written from the annotations,
    emptyDir folders made, hostPath paths (on the node's root, resolved when mounted)."""
    annotations = pod["metadata"].get("annotations") or {}
    sources: dict[str, tuple[str, Path]] = {}
    for volume in pod["spec"].get("volumes") or []:
        name = volume["name"]
        if "downwardAPI" in volume:
            path = folder / "volumes" / name
            path.mkdir(parents=True, exist_ok=True)
            for item in volume["downwardAPI"]["items"]:
                key = item["fieldRef"]["fieldPath"].split("['", 1)[1].rstrip("']")
                (path / item["path"]).write_text(annotations.get(key, ""))
            sources[name] = ("downwardAPI", path)
        elif "emptyDir" in volume:
            path = folder / "volumes" / name
            path.mkdir(parents=True, exist_ok=True)
            sources[name] = ("emptyDir", path)
        elif "hostPath" in volume:
            sources[name] = ("hostPath", Path(volume["hostPath"]["path"]))
        elif "projected" in volume:  # the ServiceAccount token: KMM's containers never use it
            sources[name] = ("projected", folder)
    return sources


def _firmware_class_path(root: Path) -> Mount:
    """The node's ``firmware_class`` parameters over this machine's (the worker writes
    ``path``; sysfs takes a folder mounted over its own, not a file)."""
    folder = root / FIRMWARE_CLASS_PARAMETERS.lstrip("/")
    if not (folder / "path").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "path").write_text("\n")
    return Mount(folder, FIRMWARE_CLASS_PARAMETERS)


def _mounts(
    container: dict[str, Any], volumes: dict[str, tuple[str, Path]], root: Path
) -> list[Mount]:
    """The container's volume mounts; a hostPath is the node's fake host root's path."""
    mounts = []
    for mount in container.get("volumeMounts") or []:
        kind, source = volumes[mount["name"]]
        if kind == "projected":
            continue
        if kind == "hostPath":
            source = root / str(source).lstrip("/")
            source.mkdir(parents=True, exist_ok=True)
        mounts.append(Mount(source, mount["mountPath"], bool(mount.get("readOnly"))))
    return mounts
