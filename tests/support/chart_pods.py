"""Play the Pods of an installed chart on this machine: what a ReplicaSet or DaemonSet
controller, cluster DNS, the kubelet's volumes and the kubelet itself would give a container.

The test cluster runs no controllers for workloads and no kubelet for gpuctl's own Pods
(testbed/harness/flags.py), so a test makes the Pod a controller would (from the template, so
the API server admits exactly it) and runs the container's own command and args here, with:
- the Service names the args hold resolved to this machine (`--coordinator=<svc>:<port>`
  becomes `127.0.0.1:<port>` and `--tls-server-name=<svc>`: the certificate is still checked
  for the Service's name), the one stand-in for cluster DNS;
- mounted files (a token, the CA) written to a folder and the args pointed at them;
- the environment the kubelet would set (values and downward-API fields).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.kube.client import Kube, path
from testbed.fakehost import FakeHost
from testbed.harness.access import KubeCluster
from testbed.harness.ports import free_loopback_ports
from tests.support.chart_release import Release, token_kubeconfig

BIN = Path(sys.executable).parent
COORDINATOR_FLAG = "--coordinator="


def pod_from_template(
    kube: Kube,
    namespace: str,
    template: Mapping[str, Any],
    name: str,
    *,
    node_name: str | None = None,
) -> dict[str, Any]:
    """The Pod a workload controller would make from `template` (on `node_name`, as the
    DaemonSet controller binds its Pods)."""
    spec = dict(template["spec"])
    if node_name:
        spec["nodeName"] = node_name
    pod: dict[str, Any] = kube.request(
        "POST",
        path("", "v1", "pods", namespace=namespace),
        body={
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**template.get("metadata", {}), "name": name},
            "spec": spec,
        },
    )
    return pod


def pod_env(container: Mapping[str, Any], pod: Mapping[str, Any]) -> dict[str, str]:
    """The container's env as the kubelet would give it (values and downward-API fields)."""
    env: dict[str, str] = {}
    for entry in container.get("env") or []:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
            continue
        resource = entry["valueFrom"].get("resourceFieldRef")
        if resource is not None:
            env[entry["name"]] = str(resource_field(container, resource))
            continue
        field = entry["valueFrom"]["fieldRef"]["fieldPath"]
        known = {
            "metadata.name": pod["metadata"]["name"],
            "metadata.namespace": pod["metadata"]["namespace"],
            "spec.nodeName": pod["spec"].get("nodeName", ""),
        }
        env[entry["name"]] = known[field]
    return env


# Kubernetes quantity suffixes (resource.Quantity): binary and decimal.
_SUFFIXES = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
}


def quantity(text: str) -> int:
    """A whole-number Kubernetes quantity ("512Mi", "1G", "2048") in its base unit."""
    for suffix, factor in _SUFFIXES.items():
        if text.endswith(suffix):
            return int(text.removesuffix(suffix)) * factor
    return int(text)


def resource_field(container: Mapping[str, Any], ref: Mapping[str, Any]) -> int:
    """A downward-API resourceFieldRef as the kubelet resolves it for a container whose
    limit is set (`limits.memory` in bytes, over the divisor: 1 when unset); a limit the
    container does not set would be the node's allocatable, which a test has not got."""
    scope, _, name = str(ref["resource"]).partition(".")
    value = ((container.get("resources") or {}).get(scope) or {}).get(name)
    if value is None:
        raise AssertionError(f"{ref['resource']} is not set: the kubelet would give the node's")
    # The API server stores an unset divisor as "0", which the kubelet takes for 1.
    divisor = quantity(str(ref.get("divisor") or "0")) or 1
    return quantity(str(value)) // divisor


def resolved_here(args: Sequence[str]) -> list[str]:
    """`args` with `--coordinator=<service>:<port>` pointed at this machine, the certificate
    still checked for the Service's name."""
    out: list[str] = []
    for arg in args:
        if arg.startswith(COORDINATOR_FLAG):
            host, _, port = arg.removeprefix(COORDINATOR_FLAG).rpartition(":")
            out += [f"{COORDINATOR_FLAG}127.0.0.1:{port}", f"--tls-server-name={host}"]
        else:
            out.append(arg)
    return out


def with_files(args: Sequence[str], files: Mapping[str, Path | int]) -> list[str]:
    """`args` with each `--flag=<path in the Pod>` named in `files` pointed at the local
    file holding what the kubelet would mount there (or `--flag=<port>` at another port)."""
    out: list[str] = []
    for arg in args:
        flag, equals, _ = arg.partition("=")
        out.append(f"{flag}={files[flag]}" if equals and flag in files else arg)
    return out


@contextlib.contextmanager
def played(
    argv: Sequence[str], env: Mapping[str, str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """A container's process, here; stopped with SIGTERM (then SIGKILL) on exit."""
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            list(argv), stdout=log_file, stderr=subprocess.STDOUT, env={**os.environ, **env}
        )
    try:
        yield process
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> int | None:
    """SIGTERM, then SIGKILL after 30 s: the exit code, None when it had to be killed."""
    if process.poll() is not None:
        return process.returncode
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return None


@dataclass
class PlayedCoordinator:
    """The chart's coordinator, run here: its Pod, its log, and (once stopped) its exit code."""

    pod: dict[str, Any]
    log: Path
    process: subprocess.Popen[bytes]
    exit_code: int | None = None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def running_coordinator(
    cluster: KubeCluster, release: Release, folder: Path, *, replica: str = "0"
) -> Iterator[PlayedCoordinator]:
    """One replica of the release's coordinator Deployment (Pod `<fullname>-coordinator-
    <replica>`; a rolling update's new Pod needs another name), with exactly the chart's flags
    and its ServiceAccount's Pod-bound token (a kubeconfig stands in for the in-cluster
    config)."""
    folder.mkdir(parents=True, exist_ok=True)
    template = release.deployment()["spec"]["template"]
    name = f"{release.fullname}-coordinator-{replica}"
    pod = pod_from_template(release.kube, release.namespace, template, name)
    container = template["spec"]["containers"][0]
    account = template["spec"]["serviceAccountName"]
    token = cluster.service_account_token(release.namespace, account, bound_pod=name)
    kubeconfig = token_kubeconfig(cluster, token, folder / "coordinator.kubeconfig")
    argv = [str(BIN / container["command"][0]), *container["args"], f"--kubeconfig={kubeconfig}"]
    with played(argv, pod_env(container, pod), folder / "coordinator.log") as process:
        coordinator = PlayedCoordinator(pod, folder / "coordinator.log", process)
        try:
            yield coordinator
        finally:
            coordinator.exit_code = stop(process)


@contextlib.contextmanager
def running_agent(
    cluster: KubeCluster,
    release: Release,
    node: str,
    host: FakeHost,
    folder: Path,
    *,
    replica: str = "",
) -> Iterator[subprocess.Popen[bytes]]:
    """The release's agent DaemonSet Pod on `node`, from its template as it is now, played here
    on the fake `host` with the chart's flags, its Pod-bound token and the coordinator's CA
    (`replica`: a suffix for the Pod a DaemonSet's rolling update makes after an upgrade)."""
    template = release.daemonset()["spec"]["template"]
    name = f"{release.fullname}-agent-{node}"[:57] + (f"-{replica}" if replica else "")
    pod = pod_from_template(release.kube, release.namespace, template, name, node_name=node)
    container = template["spec"]["containers"][0]
    audience = next(
        source["serviceAccountToken"]["audience"]
        for volume in template["spec"]["volumes"]
        if volume["name"] == "token"
        for source in volume["projected"]["sources"]
    )
    files = folder / name
    files.mkdir(parents=True, exist_ok=True)
    token = files / "token"
    token.write_text(
        cluster.service_account_token(
            release.namespace,
            template["spec"]["serviceAccountName"],
            audiences=(audience,),
            bound_pod=name,
        )
    )
    ca = files / "ca.crt"
    ca.write_text(release.ca_configmap()["data"]["ca.crt"])
    # Each node is its own host: two agents here cannot share the chart's health ports.
    health, grpc_health = free_loopback_ports(2)
    args = with_files(
        resolved_here(container["args"]),
        {
            "--token-file": token,
            "--ca-file": ca,
            "--host-root": host.root,
            "--health-port": health,
            "--grpc-health-port": grpc_health,
        },
    )
    # This machine's kernel events are not the fake host's: changes come by rescan.
    argv = [str(BIN / container["command"][0]), *container["command"][1:], *args, "--no-udev"]
    with played(argv, pod_env(container, pod), files / "agent.log") as process:
        yield process
