"""`helm test` of an installed release, run by real helm against the real API server, with the
chart's coordinator and an agent playing their Pods here (tests/support/chart_pods.py): it fails
while no agent reports, passes once one does, and fails again, naming the node, when that
agent goes away. The test Pod runs as the chart's test account, so its RBAC is proven too."""

from __future__ import annotations

import contextlib
import datetime
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from coordinator.kube.client import MERGE_PATCH, Kube, KubeError, path
from gpuctl.common import names
from testbed.fakehost import scenarios
from testbed.harness.access import KubeCluster
from testbed.harness.kubelet import pod_status
from testbed.harness.waiting import wait_until
from tests.support.chart_pods import (
    BIN,
    resolved_here,
    running_agent,
    running_coordinator,
    with_files,
)
from tests.support.chart_release import Release
from tests.support.helm import HelmError

pytestmark = pytest.mark.integration

NFD_LABEL = "feature.node.kubernetes.io/pci-0300_8086.present"
# The kubelet's sync loop, standing in: how often the test Pod is looked for.
KUBELET_PERIOD = 0.2


@dataclass
class HelmTestKubelet:
    """Runs the release's `helm test` Pod as a kubelet would: its command with its own token
    and CA, then the Pod's status (phase, exit code, the log as termination message)."""

    cluster: KubeCluster
    release: Release
    folder: Path
    outputs: list[tuple[int, str]] = field(default_factory=list)
    _stopping: threading.Event = field(default_factory=threading.Event)

    @property
    def pod_name(self) -> str:
        return f"{self.release.fullname}-test"

    def _pod(self) -> dict[str, Any] | None:
        kube = self.release.kube
        try:
            pod: dict[str, Any] = kube.request(
                "GET", path("", "v1", "pods", namespace=self.release.namespace, name=self.pod_name)
            )
        except KubeError as err:
            if err.not_found:
                return None
            raise
        return pod

    def _run(self, pod: dict[str, Any]) -> None:
        namespace = self.release.namespace
        container = pod["spec"]["containers"][0]
        token = self.folder / "token"
        token.write_text(
            self.cluster.service_account_token(
                namespace, pod["spec"]["serviceAccountName"], bound_pod=self.pod_name
            )
        )
        ca = self.folder / "ca.crt"
        ca.write_text(self.release.ca_configmap()["data"]["ca.crt"])
        args = with_files(
            resolved_here(container["args"]), {"--token-file": token, "--ca-file": ca}
        )
        started = datetime.datetime.now(datetime.UTC)
        done = subprocess.run(
            [str(BIN / container["command"][0]), *container["command"][1:], *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        log = done.stdout + done.stderr
        self.outputs.append((done.returncode, log))
        finished = datetime.datetime.now(datetime.UTC)
        message = pod_status.termination_message(container, done.returncode, log)
        state = pod_status.terminated(done.returncode, started, finished, message)
        phase = pod_status.SUCCEEDED if done.returncode == 0 else pod_status.FAILED
        status = pod_status.pod_status(
            phase, started, [pod_status.container_status("test", container["image"], state)]
        )
        self.release.kube.request(
            "PATCH",
            path("", "v1", "pods", namespace=namespace, name=self.pod_name) + "/status",
            body={"status": status},
            content_type=MERGE_PATCH,
        )

    def _loop(self) -> None:
        played_uids: set[str] = set()
        while not self._stopping.wait(KUBELET_PERIOD):
            pod = self._pod()
            if pod is None or pod["metadata"]["uid"] in played_uids:
                continue
            played_uids.add(pod["metadata"]["uid"])
            self._run(pod)

    @contextlib.contextmanager
    def running(self) -> Iterator[HelmTestKubelet]:
        thread = threading.Thread(target=self._loop, name="test-pod-kubelet", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stopping.set()
            thread.join(timeout=150)


def helm_test(release: Release) -> str:
    return release.helm.run(
        "test", release.name, "--namespace", release.namespace, "--timeout", "3m"
    )


def gpunode_session(kube: Kube, node: str) -> tuple[str, bool]:
    """The node's GPUNode session ("" without one) and whether its report is Fresh."""
    try:
        gpunode = kube.request("GET", path(names.GROUP, names.VERSION, "gpunodes", name=node))
    except KubeError as err:
        if err.not_found:
            return "", False
        raise
    status = gpunode.get("status") or {}
    fresh = any(
        c.get("type") == names.GPUNODE_FRESH and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return str(status.get("session", "")), fresh


def test_helm_test_passes_only_while_an_agent_reports_through_the_coordinator(
    kube_cluster: KubeCluster, release: Release, make_node: Any, tmp_path: Path
) -> None:
    release.install()
    node = make_node("gpu-1", {NFD_LABEL: "true"}).metadata.name
    kubelet = HelmTestKubelet(kube_cluster, release, tmp_path)
    with running_coordinator(kube_cluster, release, tmp_path) as coordinator, kubelet.running():
        wait_until(
            "the leading coordinator publishes its CA",
            release.ca_configmap_or_none,
            timeout_seconds=120,
        )
        # No agent yet: the coordinator answers, but no node reports.
        with pytest.raises(HelmError, match="failed"):
            helm_test(release)
        code, log = kubelet.outputs[-1]
        assert code == 1
        assert "0 of 0 GPU node(s) have an agent reporting, at least 1 required" in log

        host = scenarios.arc_b580_in_tree(tmp_path / "host")
        with running_agent(kube_cluster, release, node, host, tmp_path) as agent:
            wait_until(
                f"{node}'s agent is connected and its report fresh",
                lambda: gpunode_session(release.kube, node) == ("Connected", True),
                timeout_seconds=120,
            )
            output = helm_test(release)
            assert "Phase:          Succeeded" in output, output
            code, log = kubelet.outputs[-1]
            assert code == 0
            assert node in log  # the node list, read from the coordinator
            assert agent.poll() is None

        wait_until(
            f"the coordinator sees {node}'s agent gone",
            lambda: gpunode_session(release.kube, node)[0] == "Disconnected",
            timeout_seconds=120,
        )
        with pytest.raises(HelmError, match="failed"):
            helm_test(release)
        code, log = kubelet.outputs[-1]
        assert code == 1
        assert f"0 of 1 GPU node(s) have an agent reporting, at least 1 required ({node}: " in log
    assert coordinator.exit_code == 0, coordinator.log_text()[-4000:]
    assert "forbidden" not in coordinator.log_text().lower()
