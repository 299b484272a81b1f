"""How the kubelet of KMM's Pods runs each kind of Pod it serves, on the Pod's own thread.

Apart from the loop (kubelet.py: the watches, which Pods it serves, deletions) because each
kind's run is a story of its own; ``PodRunners`` is the half of ``KmmKubelet`` that runs one
Pod, reading the kubelet's state (its API client, catalogue, nodes, back-off).

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
runs nothing). A Pod's containers run on through an API server or etcd outage, and its
status is written once the API server answers again (``_answered``). Every container's output
is kept under ``folder/pods/<pod>-<uid>/``.
"""

from __future__ import annotations

import datetime
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client as k8s

from testbed.harness.kubelet import pod_status as status
from testbed.harness.kubelet.catalogue import ImageCatalogue
from testbed.harness.kubelet.containers import Mount, outside, start
from testbed.harness.kubelet.pod_run import PodGoneError, PodRun, WorkerPod
from testbed.harness.kubelet.sign_pod import SignPod, VolumeNotReadyError
from testbed.harness.kubelet.volumes import container_mounts, firmware_class_path, write_volumes

SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
NODE_READY_POLL_SECONDS = 0.2
HTTP_NOT_FOUND = 404
RETRIED_STATUSES = (0, 429, 500, 502, 503, 504)  # 0: no HTTP answer at all
API_RETRY_SECONDS = 0.5
REPO = Path(__file__).resolve().parents[3]
_T = TypeVar("_T")


class PodRunners:
    """Runs one Pod of each kind KMM makes (and gpuctl's image probe); mixed into
    ``KmmKubelet``, whose constructor sets the state below."""

    # The API server and the namespace; where runs write their logs and volumes.
    _core: Any
    namespace: str
    folder: Path
    # The registry, the images that run as kaniko and sign-file, the back-off between tries.
    catalogue: ImageCatalogue
    kaniko_image: str
    sign_image: str
    backoff: status.BackOff
    _clock: Callable[[], datetime.datetime]
    # KMM's worker binary, the folder of its modprobe and the kernel record it writes to.
    _worker_binary: Path
    _bin: Path
    record: Path
    # The nodes served (their fake roots and kernels) and the test's controls, under _lock.
    _roots: dict[str, Path]
    _kernels: dict[str, str]
    _delays: dict[str, float]
    _held: set[str]
    _probes_held: set[str]
    _lock: threading.Lock

    def _answered(self, run: PodRun, call: Callable[[], _T]) -> _T:
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

    def _write_status(self, pod: dict[str, Any], run: PodRun, body: dict[str, Any]) -> None:
        self._answered(
            run,
            lambda: self._core.patch_namespaced_pod_status(
                pod["metadata"]["name"], self.namespace, {"status": body}
            ),
        )

    def _sleep(self, run: PodRun, seconds: float) -> None:
        if run.stop.wait(seconds):
            raise PodGoneError

    def _run_pull(self, pod: dict[str, Any], run: PodRun) -> None:
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

    def _secret(self, run: PodRun, name: str) -> dict[str, Any] | None:
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

    def _run_sign(self, pod: dict[str, Any], run: PodRun) -> None:
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

    def _run_probe(self, pod: dict[str, Any], run: PodRun) -> None:
        """A one-container Pod bound to a served node, ``restartPolicy: Never`` (gpuctl's
        image probe): its image pulled as a worker's init container's is (a missing one waits
        with ``ErrImagePull``, then ``ImagePullBackOff``, pulled again after the back-off), its
        command run once over the image's folder and its volumes; Succeeded on exit code 0,
        else Failed, the container terminated with its exit code (and, under
        ``FallbackToLogsOnError``, its log's tail as the message)."""
        container = pod["spec"]["containers"][0]
        name, image, node = container["name"], container["image"], pod["spec"]["nodeName"]
        folder = self.folder / "pods" / f"{pod['metadata']['name']}-{run.uid[:8]}"
        volumes = write_volumes(pod, folder)
        started = self._clock()

        def write(phase: str, state: dict[str, Any]) -> None:
            body = status.pod_status(phase, started, [status.container_status(name, image, state)])
            self._write_status(pod, run, body)

        attempt = 0
        while True:
            # `hold_node` and `delay_node` are a test's slow KMM: gpuctl's probe runs.
            self._wait_to_start(node, run, kmms=False)
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
        mounts += container_mounts(container, volumes, root)
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

    def _node_ready(self, node: str, run: PodRun) -> bool:
        response = self._answered(run, lambda: self._core.read_node(node, _preload_content=False))
        conditions = json.loads(response.data).get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def _held_back(self, node: str) -> bool:
        with self._lock:
            return node in self._held

    def _probe_held_back(self, node: str) -> bool:
        with self._lock:
            return node in self._probes_held

    def _wait_to_start(self, node: str, run: PodRun, *, kmms: bool = True) -> None:
        """Until the node is Ready; for KMM's worker containers (`kmms`), also until not held
        back by `hold_node`, and then `delay_node`'s seconds (a slow KMM is not a slow probe);
        for gpuctl's probes, until not held back by `hold_probes`."""
        held = self._held_back if kmms else self._probe_held_back
        while held(node) or not self._node_ready(node, run):
            self._sleep(run, NODE_READY_POLL_SECONDS)
        if not kmms:
            return
        with self._lock:
            delay = self._delays.get(node, 0.0)
        self._sleep(run, delay)

    def _run_worker(self, pod: dict[str, Any], run: PodRun) -> None:
        """The init container until it succeeds, then the worker container until it does."""
        worker = WorkerPod(
            pod, self.folder / "pods" / f"{pod['metadata']['name']}-{run.uid[:8]}", self._clock()
        )
        init = self._run_init_container(worker, run)
        self._run_worker_container(worker, run, init)

    def _write_worker(self, worker: WorkerPod, run: PodRun, phase: str) -> None:
        self._write_status(worker.pod, run, worker.status(phase))

    def _run_init_container(self, worker: WorkerPod, run: PodRun) -> dict[str, Any]:
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
            mounts += container_mounts(worker.init, worker.volumes, self._roots[worker.node])
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

    def _run_worker_container(self, worker: WorkerPod, run: PodRun, init: dict[str, Any]) -> None:
        """KMM's worker binary over the node's fake host, restarted while it fails."""
        root = self._roots[worker.node]
        mounts = [*container_mounts(worker.main, worker.volumes, root), firmware_class_path(root)]
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
        run: PodRun,
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
