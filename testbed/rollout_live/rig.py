"""A rollout test rig: `gpuctl-coordinator` as a real process, agents, real KMM, nodes.

`RolloutRig` owns, for one test: the coordinator process (started, SIGKILLed and restarted
at will, TLS gRPC for the agents, `--metrics-port`), agent ServiceAccount tokens bound to a
Pod per Node, the nodes' fake roots (served by the kubelet of KMM's Pods, so KMM's own worker
loads and unloads on them), the module images of the versions tests use, real `gpuctl-agent
run` processes or hand-written protocol agents, and a GPUDriver labelled for this coordinator.
The `rollout_rig` fixture (tests/integration/conftest.py) builds it from the shared fixtures.

Every `modprobe` KMM's workers run is recorded at the node's kernel with whether the node was
busy then (a process holding a DRM node, VFs enabled, a module holding xe); `close()` ends
every test by asserting that KMM never tried to unload a busy node (`kernels` reads the record
in the rollout's terms).

The versions tests speak of (OLD, NEW), their images and the key that signs them are
testbed/rollout_live/images.py. The rollout and KMM's labels speak of the Module's KMM version
(gpuctl.gpudriver.module_spec.kmm_version of the GPUDriver's spec): `target()` is the current
one, `kmm_version_at(version)` the one a version gives with the rest of the spec unchanged.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coordinator.kube.client import MERGE_PATCH, Kube, KubeError, path
from gpuctl.common import names
from gpuctl.gpudriver.module_spec import kmm_version
from gpuctl.rollout.input.build import kmm_labels
from testbed.agent_process import start_agent_process
from testbed.cluster_agents import AgentPods, agent_username, delete_gpunode
from testbed.cluster_api import TEST_LABEL, gpudriver, node_labels
from testbed.fakehost import FakeHost
from testbed.fakehost.host import DEFAULT_RELEASE
from testbed.fakehost.signing import SigningKey
from testbed.fixture_types import MakeNode
from testbed.harness.access import KubeCluster
from testbed.harness.kubelet import signature_check
from testbed.harness.kubelet.record import KernelCall, never
from testbed.harness.ports import free_loopback_ports
from testbed.harness.real_kmm import RealKmm
from testbed.harness.serving_tls import ServingTls
from testbed.harness.waiting import wait_until
from testbed.rollout_live.fake_nodes import (
    UNVERSIONED,
    backport_version_string,
    srcversion_of,
)
from testbed.rollout_live.images import (
    COMPANION_MODULES,
    FIRMWARE,
    NEW,
    OLD,
    image_of,
    image_signing_key,
    kernel_mappings,
    pushed_image,
)
from testbed.rollout_live.kernels import NodeKernels
from testbed.rollout_live.protocol_agent import ProtocolAgent

BIN = Path(sys.executable).parent
# Where the kernel says which boot this is (the kubelet's nodeInfo.bootID reads it too).
HOST_BOOT_ID = "proc/sys/kernel/random/boot_id"
DRIVER = "gpu"
DRIVER_TARGET = names.TARGET_LABEL


# The label KMM puts on its worker Pods, valued Load or Unload.
WORKER_ACTION = "kmm.node.kubernetes.io/worker-action"


def stop_process(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    stop_processes([process], sig)


def stop_processes(processes: list[subprocess.Popen[bytes]], sig: int = signal.SIGTERM) -> None:
    """Signals every process first, then waits for each (killed after 20 s), so that stopping
    many takes as long as the slowest, not their sum."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        process.send_signal(sig)
    for process in running:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# Longer than any test: the coordinators of the tests never resync (coordinator_flags).
NO_RESYNC_SECONDS = 3600


class RolloutRig:
    def __init__(
        self,
        *,
        cluster: KubeCluster,
        namespace: str,
        kube: Kube,
        admin: Any,
        kmm: RealKmm,
        tls: ServingTls,
        make_node: MakeNode,
        folder: Path,
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.kube = kube
        self.kmm = kmm
        self.tls = tls
        self.folder = folder
        self._make_node = make_node
        self.pods = AgentPods(cluster, namespace, admin)
        self.hosts: dict[str, FakeHost] = {}
        self.kernels = NodeKernels(kmm, self.hosts, self.kmm_version_at, UNVERSIONED)
        self.port, self.metrics_port = free_loopback_ports(2)
        self.coordinator: subprocess.Popen[bytes] | None = None
        self._closing = threading.Event()
        self._supervisor: threading.Thread | None = None
        # Whom the coordinator acts as (the admin unless a test runs it under the chart's
        # RBAC), and extra environment (POD_NAME: the Pod it labels while serving).
        self.coordinator_kubeconfig: Path = cluster.kubeconfig
        self.coordinator_env: dict[str, str] = {}
        # The coordinator's command, before its flags (a world run's mutant replaces it).
        self.coordinator_command: list[str] = [str(BIN / "gpuctl-coordinator")]
        # Which unloads on a busy node the last check leaves out: none, but those a world
        # run's report has already (testbed/world/invariants.py `Checks.judged`).
        self.unload_excused: Callable[[KernelCall], bool] = never
        self._coordinator_logs: list[Any] = []
        self.starts = 0
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.protocol_agents: dict[str, ProtocolAgent] = {}
        self._logs = contextlib.ExitStack()
        (folder / "ca.crt").write_bytes(tls.ca_pem)
        self.module = f"{DRIVER}-gpu"  # the KMM Module the coordinator writes for DRIVER
        self.labels = kmm_labels(namespace, self.module)
        self._rollout: dict[str, Any] = {}

    # -- nodes and their agents -------------------------------------------------------------

    def add_node(
        self,
        short: str,
        make_root: Callable[[Path], FakeHost],
        *,
        labelled: bool = True,
        kernel_release: str = DEFAULT_RELEASE,
    ) -> str:
        """A Node selected by the test GPUDriver, with its fake root (which runs
        `kernel_release`, as the Node says); `labelled`: targeted at OLD (the target label and
        KMM's version label), as a rollout before left it."""
        extra = {DRIVER_TARGET: DRIVER, self.labels.version: self.kmm_version_at(OLD)}
        extra = extra if labelled else {}
        made = self._make_node(
            short, labels=node_labels(self.namespace, **extra), kernel_version=kernel_release
        )
        name: str = made.metadata.name
        host = make_root(self.folder / name / "root")
        # The kernel's boot id, the one the kubelet posted: the agent reads the same file.
        host.write(HOST_BOOT_ID, f"{made.status.node_info.boot_id}\n")
        if host.kernel_release != kernel_release:
            raise ValueError(f"{name}: its root runs {host.kernel_release}, not {kernel_release}")
        if signature_check.enforces_signatures(host.root):
            signature_check.trust_builtin_key(host.root, image_signing_key().certificate_der)
        self.hosts[name] = host
        self.kmm.serve(name, host.root, host.kernel_release)
        for version in (OLD, NEW, None):
            self.publish(version, host.kernel_release)
        return name

    def publish(
        self,
        version: str | None,
        kernel_release: str,
        image: str | None = None,
        srcversion: str | None = None,
        *,
        signed_with: SigningKey | None = None,
        unsigned: bool = False,
    ) -> None:
        """Pushes the image of ``version`` (None: unversioned) built for ``kernel_release``,
        as ``image`` (default: ``pushed_image(version, kernel_release)``), its modules signed
        with ``signed_with`` (default: ``image_signing_key()``), or not at all when
        ``unsigned``."""
        key = None if unsigned else signed_with or image_signing_key()
        built = version or UNVERSIONED
        self.kmm.catalogue.add_xe_image(
            image or pushed_image(version, kernel_release),
            [kernel_release],
            version=backport_version_string(built),
            srcversion=srcversion or srcversion_of(built),
            companions=COMPANION_MODULES,
            firmware=FIRMWARE,
            signed_with=key,
        )

    def token_file(self, node: str) -> Path:
        token_file = self.folder / node / "token"
        token_file.write_text(self.pods.token(node))
        return token_file

    def start_agent(self, node: str, *extra_args: str) -> None:
        """A real `gpuctl-agent run` process on the node's fake root, with `extra_args`."""
        log = self._logs.enter_context((self.folder / node / "agent.log").open("ab"))
        self.agents[node] = start_agent_process(
            port=self.port,
            ca_file=self.folder / "ca.crt",
            token_file=self.token_file(node),
            host_root=self.hosts[node].root,
            node=node,
            log=log,
            backoff_initial=0.1,
            backoff_max=0.5,
            extra_args=extra_args,
        )

    def start_protocol_agent(self, node: str) -> ProtocolAgent:
        """The hand-written agent (prepare/restore) on the node's fake root."""
        token = self.pods.token(node)
        agent = ProtocolAgent(
            f"localhost:{self.port}",
            token=token,
            root_certificate=self.tls.ca_pem,
            node=node,
            host=self.hosts[node],
        )
        self.protocol_agents[node] = agent
        return agent

    # -- the coordinator process ------------------------------------------------------------

    def start_coordinator(
        self, *extra: str, metrics_port: int | None = None
    ) -> subprocess.Popen[bytes]:
        """A coordinator process (a new identity each time); `metrics_port` for a second
        replica, which cannot share the first one's."""
        log = (self.folder / "coordinator.log").open("ab")
        self._coordinator_logs.append(log)
        self.coordinator = subprocess.Popen(
            [*self.coordinator_command, *self.coordinator_flags(*extra, metrics_port=metrics_port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.coordinator_env},
        )
        return self.coordinator

    def coordinator_flags(self, *extra: str, metrics_port: int | None = None) -> list[str]:
        """The flags of the test's coordinator (a new identity each time)."""
        self.starts += 1
        return [
            f"--kubeconfig={self.coordinator_kubeconfig}",
            f"--namespace={self.namespace}",
            f"--gpudriver-selector={TEST_LABEL}={self.namespace}",
            f"--identity=rollout-{self.starts}",
            "--lease-duration=4",
            "--renew-deadline=3",
            "--retry-period=0.3",
            f"--grpc-port={self.port}",
            "--grpc-address=127.0.0.1",
            f"--tls-cert-file={self.tls.files.cert_file}",
            f"--tls-key-file={self.tls.files.key_file}",
            f"--agent-service-account={agent_username(self.namespace)}",
            "--heartbeat-interval=0.5",
            "--rescan-interval=1",
            f"--metrics-port={metrics_port or self.metrics_port}",
            "--metrics-address=127.0.0.1",
            "--rollout-blocked-recheck=0.5",
            # No resync within a test: one that passes only because the coordinator looked
            # again after a minute would hide an event the coordinator missed.
            f"--resync-period={NO_RESYNC_SECONDS}",
            "--kmm-worker-hold",
            *extra,
        ]

    def restart_coordinator_when_it_exits(self, *extra: str) -> None:
        """As a Deployment's kubelet does (restartPolicy Always): whenever the coordinator
        exits (it does when it loses its Lease, e.g. while the API server restarts), start it
        again with `extra`, until the rig closes."""

        def supervise() -> None:
            while not self._closing.wait(0.2):
                if self.coordinator is not None and self.coordinator.poll() is not None:
                    self.start_coordinator(*extra)

        self._supervisor = threading.Thread(target=supervise, name="kubelet", daemon=True)
        self._supervisor.start()

    def kill_coordinator(self) -> None:
        """SIGKILL: no Lease released, nothing flushed."""
        if self.coordinator is not None:
            stop_process(self.coordinator, signal.SIGKILL)

    def coordinator_log(self) -> str:
        return (self.folder / "coordinator.log").read_text(errors="replace")[-4000:]

    # -- the GPUDriver ----------------------------------------------------------------------

    def spec(self, version: str | None) -> dict[str, Any]:
        """The test GPUDriver's spec at `version` (None: without one)."""
        return {
            "nodeSelector": {TEST_LABEL: self.namespace},
            "kernelModule": {
                **({"version": version} if version else {}),
                "kernelMappings": kernel_mappings(version),
            },
            "rollout": self._rollout,
        }

    def create_driver(self, version: str | None, rollout: dict[str, Any]) -> None:
        self._rollout = rollout
        self.kube.request(
            "POST",
            path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL),
            body=gpudriver(DRIVER, self.namespace, self.spec(version)),
        )

    def target(self) -> str:
        """The Module's KMM version of the GPUDriver as it is now: the rollout's target."""
        return kmm_version(self.driver()["spec"])

    def kmm_version_at(self, version: str | None) -> str:
        """The KMM version of the GPUDriver's spec (as created, if not yet) at `version`."""
        try:
            spec = dict(self.driver()["spec"])
        except KubeError:
            spec = self.spec(version)
        kernel_module = {k: v for k, v in spec["kernelModule"].items() if k != "version"}
        kernel_module["kernelMappings"] = kernel_mappings(version)
        spec["kernelModule"] = {**kernel_module, **({"version": version} if version else {})}
        return kmm_version(spec)

    def publish_everywhere(self, version: str) -> None:
        """Pushes the image of ``version`` for every node's kernel."""
        for host in self.hosts.values():
            self.publish(version, host.kernel_release)

    def publish_rebuild(self, version: str) -> dict[str, Any]:
        """Pushes ``version`` built again (a patched build: same version, new srcversion) for
        every node's kernel; returns the kernelModule change that points at it."""
        for host in self.hosts.values():
            rebuilt = f"{pushed_image(version, host.kernel_release)}-rebuilt"
            self.publish(version, host.kernel_release, rebuilt, srcversion_of(f"{version}+1"))
        return {
            "kernelMappings": [{"regexp": "^.+$", "containerImage": f"{image_of(version)}-rebuilt"}]
        }

    def set_version(self, version: str) -> None:
        """The admin's upgrade: the GPUDriver's version and its image, in one patch."""
        self.patch_driver(
            {
                "spec": {
                    "kernelModule": {"version": version, "kernelMappings": kernel_mappings(version)}
                }
            }
        )

    def patch_driver(self, patch: dict[str, Any]) -> None:
        self.kube.request(
            "PATCH",
            path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL, name=DRIVER),
            body=patch,
            content_type=MERGE_PATCH,
        )

    def driver(self) -> dict[str, Any]:
        return self.kube.request(
            "GET", path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL, name=DRIVER)
        )

    def rollout_status(self) -> dict[str, Any]:
        return dict((self.driver().get("status") or {}).get("rollout") or {})

    def node(self, name: str) -> dict[str, Any]:
        return self.kube.request("GET", path("", "v1", "nodes", name=name))

    def phase(self, name: str) -> str:
        return str((self.node(name)["metadata"].get("labels") or {}).get(names.STATE_LABEL, ""))

    def annotation(self, name: str, key: str) -> str:
        return str((self.node(name)["metadata"].get("annotations") or {}).get(key, ""))

    def state(self, name: str) -> str:
        """ "<phase> <version>": the node's phase and the version it is about, from one read
        of the Node (two reads could pair one write's phase with the next one's version)."""
        meta = self.node(name)["metadata"]
        phase = (meta.get("labels") or {}).get(names.STATE_LABEL, "")
        return f"{phase} {(meta.get('annotations') or {}).get(names.STATE_VERSION, '')}"

    def wait_phases(
        self, wanted: dict[str, str], timeout: float = 60.0, version: str | None = None
    ) -> None:
        """Waits until each node is in its phase about `version` (a KMM version, or
        names.REMOVAL_VERSION; default: the current target). Phase "" waits until the node
        has left the rollout (no phase, no version)."""
        about = version or (self.target() if any(wanted.values()) else "")

        def expected(phase: str) -> str:
            return f"{phase} {about}" if phase else " "

        def check() -> dict[str, str] | None:
            now = {n: self.state(n) for n in wanted}
            return now if now == {n: expected(p) for n, p in wanted.items()} else None

        try:
            wait_until(f"phases {wanted}", check, timeout_seconds=timeout)
        except AssertionError as err:
            status = json.dumps(self.rollout_status())
            raise AssertionError(
                f"{err}\nstatus: {status}\nlog: {self.coordinator_log()}"
            ) from None

    def wait_kmm_loaded(self, nodes: list[str], timeout: float = 60.0) -> None:
        """Waits until KMM's NodeModulesConfig says each node runs the current target."""
        target = self.target()

        def check() -> dict[str, str] | None:
            loaded = {n: self.kmm.loaded(self.module, n) for n in nodes}
            versions = {n: (v.version if v else "") for n, v in loaded.items()}
            return versions if set(versions.values()) == {target} else None

        wait_until(f"KMM reports {nodes} loaded at {target}", check, timeout_seconds=timeout)

    def worker_pods(self, action: str | None = None, node: str | None = None) -> list[Any]:
        """KMM's worker Pods that exist now: of `action` ("Load", "Unload") or any, on `node`
        or any."""
        selector = f"{WORKER_ACTION}={action}" if action else WORKER_ACTION
        answer = self.kube.request(
            "GET",
            path("", "v1", "pods", namespace=self.namespace),
            query={"labelSelector": selector},
        )
        pods = list(answer.get("items") or [])
        return [p for p in pods if node is None or p["spec"].get("nodeName") == node]

    def label_node(self, node: str, labels: dict[str, str | None]) -> None:
        self.kube.request(
            "PATCH",
            path("", "v1", "nodes", name=node),
            body={"metadata": {"labels": labels}},
            content_type=MERGE_PATCH,
        )

    def delete_driver(self) -> None:
        self.kube.request(
            "DELETE", path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL, name=DRIVER)
        )

    def driver_gone(self) -> bool:
        try:
            self.driver()
        except KubeError as err:
            if err.not_found:
                return True
            raise
        return False

    def cordon(self, node: str, cordoned: bool = True) -> None:
        self.kube.request(
            "PATCH",
            path("", "v1", "nodes", name=node),
            body={"spec": {"unschedulable": cordoned}},
            content_type=MERGE_PATCH,
        )

    # -- teardown ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stops everything the rig started, then asserts KMM never tried to unload a busy
        node during the test."""
        self._closing.set()
        if self._supervisor is not None:
            self._supervisor.join()
        # The agents first, all at once: their streams then end, and the coordinator's gRPC
        # server stops without waiting out its grace period for them (2 s a test).
        stop_processes(list(self.agents.values()))
        for agent in self.protocol_agents.values():
            agent.close()
        if self.coordinator is not None:
            stop_process(self.coordinator)
        self._logs.close()
        for log in self._coordinator_logs:
            log.close()
        self.pods.delete_pods()
        for node in self.hosts:
            delete_gpunode(self.kube, node)
        with contextlib.suppress(KubeError):
            self.kube.request(
                "DELETE", path(names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL, name=DRIVER)
            )
        with contextlib.suppress(KubeError):
            self.patch_driver({"metadata": {"finalizers": None}})
        self.kmm.assert_no_unload_while_busy(self.unload_excused)
