"""GPU daemons on the test's nodes: a real DaemonSet whose pods hold the node's render node open.

On a real GPU node XPU Manager, an exporter or a monitoring agent always holds `/dev/dri`: a
DaemonSet's pod, which cordons and evictions do not keep off the node. Here the DaemonSet is
real (the DaemonSet controller makes its pods, kube-scheduler binds them: see
testbed/harness/node_lifecycle.py); `DaemonRuntime` stands in for what a test cluster lacks
under them, the kubelet and the container runtime. Each pod bound to a node with a fake host
gets a process there, in the pod's cgroup (systemd driver, containerd, as agent/
cgroup_owner.py reads it), holding renderD128 open (and, as the kernel's DRM open does, a
reference on the xe module); then the pod is reported Running and Ready. A pod being deleted
has its process stopped first and is then deleted (grace period 0), as a kubelet confirms a
deletion only once its containers are gone. kwok leaves such pods to it (HOST_PROCESS_LABEL,
testbed/harness/kwok.py). `hold(node)` starts nothing more there: a daemon that does not come
back. For a world run (testbed/world/daemons.py), `on_open(node)` is told just before a pod's
process opens the render node, `needs_device` starts a pod's process only once the node has
`xe` loaded (a daemon crash-looping until its device is there), and `rebooted(node)` forgets
the processes the node's reboot ended, so the kubelet's restart of its pods starts them again.
"""

from __future__ import annotations

import datetime
import itertools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.kube.client import MERGE_PATCH, Kube, KubeError, path
from testbed.fakehost import FakeHost
from testbed.fakehost.scenarios import B580
from testbed.harness.kwok import HOST_PROCESS_LABEL

POLL_SECONDS = 0.1
FIRST_PID = 6000
HTTP_NOT_FOUND = 404


def daemon_set(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    node_selector: Mapping[str, str],
    scheduler_name: str | None = None,
) -> None:
    """A DaemonSet `name` whose pods run on the nodes with `node_selector` (its pods carry
    app=<name> and HOST_PROCESS_LABEL=<name>: the command DaemonRuntime runs for them),
    scheduled by `scheduler_name` (default: the cluster's default scheduler)."""
    labels = {"app": name, HOST_PROCESS_LABEL: name}
    pod_spec: dict[str, Any] = {
        "nodeSelector": dict(node_selector),
        "containers": [{"name": name, "image": f"registry.example.com/{name}:1"}],
    }
    if scheduler_name:
        pod_spec["schedulerName"] = scheduler_name
    kube.request(
        "POST",
        path("apps", "v1", "daemonsets", namespace=namespace),
        body={
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": pod_spec,
                },
            },
        },
    )


def bare_pod(kube: Kube, namespace: str, name: str, *, node: str) -> None:
    """A pod of no controller bound to `node` whose process holds the render node without
    asking for a GPU (a privileged debug shell mounting /dev/dri)."""
    kube.request(
        "POST",
        path("", "v1", "pods", namespace=namespace),
        body={
            "metadata": {"name": name, "labels": {HOST_PROCESS_LABEL: name}},
            "spec": {
                "nodeName": node,
                "containers": [
                    {
                        "name": name,
                        "image": "registry.example.com/debug:1",
                        "securityContext": {"privileged": True},
                    }
                ],
            },
        },
    )


def gpu_workload_pod(kube: Kube, namespace: str, name: str, *, node: str) -> None:
    """A workload pod of no controller bound to `node`, asking for one gpu.intel.com/xe, whose
    process `name` holds the render node (an inference server): a GPU pod."""
    kube.request(
        "POST",
        path("", "v1", "pods", namespace=namespace),
        body={
            "metadata": {"name": name, "labels": {"app": name, HOST_PROCESS_LABEL: name}},
            "spec": {
                "nodeName": node,
                "containers": [
                    {
                        "name": name,
                        "image": f"registry.example.com/{name}:1",
                        "resources": {"limits": {"gpu.intel.com/xe": "1"}},
                    }
                ],
            },
        },
    )


def _hold_module(host: FakeHost, change: int) -> None:
    """The xe module's reference count, as an open (or a close) of its DRM node changes it
    (nothing while no xe is loaded)."""
    refcnt = host.real("sys/module/xe/refcnt")
    if refcnt.exists():
        count = int(refcnt.read_text().strip() or "0")
        refcnt.write_text(f"{max(0, count + change)}\n")


def pod_cgroup(uid: str, container: str) -> str:
    """/proc/<pid>/cgroup of a process in a container of pod `uid` (cgroup v2, systemd)."""
    slice_uid = uid.replace("-", "_")
    return (
        "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
        f"{slice_uid}.slice/cri-containerd-{container}.scope\n"
    )


@dataclass(frozen=True)
class Started:
    node: str
    pod: str
    uid: str
    pid: int


class DaemonRuntime:
    """Runs the processes of the pods with HOST_PROCESS_LABEL on `hosts`: in `namespace`, or in
    every namespace when it is None."""

    def __init__(
        self,
        kube: Kube,
        namespace: str | None,
        hosts: Mapping[str, FakeHost],
        *,
        on_open: Callable[[str], None] = lambda _node: None,
        needs_device: bool = False,
    ) -> None:
        self._kube = kube
        self._on_open = on_open
        self._needs_device = needs_device
        self._namespace = namespace
        self._hosts = hosts
        self._pids = itertools.count(FIRST_PID)
        self._running: dict[str, Started] = {}  # pod uid -> its process
        self._held: set[str] = set()
        self._lock = threading.Lock()
        # What happened, in order: ("started" | "stopped", Started).
        self.history: list[tuple[str, Started]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="daemon-runtime", daemon=True)

    def start(self) -> DaemonRuntime:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def running(self) -> dict[str, Started]:
        """The processes running now, by node."""
        with self._lock:
            return {s.node: s for s in self._running.values()}

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                self._sync()
            except KubeError as err:  # the API server restarting: try again
                self.errors.append(str(err))

    def _sync(self) -> None:
        listed = self._kube.request(
            "GET",
            path("", "v1", "pods", namespace=self._namespace),
            query={"labelSelector": HOST_PROCESS_LABEL},
        )
        pods = {p["metadata"]["uid"]: p for p in listed.get("items") or []}
        for uid, pod in pods.items():
            node = (pod.get("spec") or {}).get("nodeName") or ""
            if pod["metadata"].get("deletionTimestamp"):
                self._stop_process(uid)
                self._confirm_deletion(pod)
            elif node in self._hosts and node not in self._held:
                self._start_process(uid, pod, node)
        for uid in set(self._running) - set(pods):
            self._stop_process(uid)

    def rebooted(self, node: str) -> None:
        """`node` rebooted: its processes went with the old boot (nothing to stop, no module
        reference to give back); the pods still bound there are started again."""
        with self._lock:
            for uid in [uid for uid, s in self._running.items() if s.node == node]:
                self.history.append(("stopped", self._running.pop(uid)))

    def hold(self, node: str) -> None:
        """Start no more pods on `node` (they stay Pending): a daemon that does not come back."""
        self._held.add(node)

    def _start_process(self, uid: str, pod: dict[str, Any], node: str) -> None:
        if uid in self._running:
            return
        host = self._hosts[node]
        if self._needs_device and not host.real("sys/module/xe").exists():
            return  # no render node to open yet: tried again on the next pass
        command = str(pod["metadata"]["labels"][HOST_PROCESS_LABEL])[:15]
        pid = next(self._pids)
        self._on_open(node)
        host.add_process(pid, command, cgroup=pod_cgroup(uid, f"{pid:064x}"))
        host.add_drm_fd(pid, 5, "renderD128", pdev=B580, client_id=pid)
        _hold_module(host, +1)
        started = Started(node, str(pod["metadata"]["name"]), uid, pid)
        with self._lock:
            self._running[uid] = started
            self.history.append(("started", started))
        self._report_running(pod)

    def _report_running(self, pod: dict[str, Any]) -> None:
        """The pod Running and Ready, its container started, as a kubelet writes it."""
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ready = [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("Initialized", "ContainersReady", "Ready")
        ]
        container = pod["spec"]["containers"][0]
        state = {"running": {"startedAt": now}}
        self._kube.request(
            "PATCH",
            path(
                "",
                "v1",
                "pods",
                namespace=pod["metadata"]["namespace"],
                name=pod["metadata"]["name"],
                subresource="status",
            ),
            body={
                "status": {
                    "phase": "Running",
                    "startTime": now,
                    "conditions": ready,
                    "containerStatuses": [
                        {
                            "name": container["name"],
                            "image": container["image"],
                            "imageID": "",
                            "ready": True,
                            "started": True,
                            "restartCount": 0,
                            "state": state,
                        }
                    ],
                }
            },
            content_type=MERGE_PATCH,
        )

    def _stop_process(self, uid: str) -> None:
        with self._lock:
            started = self._running.pop(uid, None)
            if started is None:
                return
            self.history.append(("stopped", started))
        host = self._hosts[started.node]
        host.remove_process(started.pid)
        _hold_module(host, -1)

    def _confirm_deletion(self, pod: dict[str, Any]) -> None:
        try:
            self._kube.request(
                "DELETE",
                path(
                    "",
                    "v1",
                    "pods",
                    namespace=pod["metadata"]["namespace"],
                    name=pod["metadata"]["name"],
                ),
                body={"gracePeriodSeconds": 0, "preconditions": {"uid": pod["metadata"]["uid"]}},
            )
        except KubeError as err:
            if err.status != HTTP_NOT_FOUND:
                raise
