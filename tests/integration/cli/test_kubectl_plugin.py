"""`kubectl gpuctl ...` through a real kubectl (built by hack/kube/ensure from the same
Kubernetes release as the test API server): kubectl's own plugin lookup finds the
`kubectl-gpuctl` the package installs and runs it with the rest of the line, against the
cluster kubectl would use (KUBECONFIG), and `kubectl plugin list` shows it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuctl.common.build_version import gpuctl_version
from testbed.harness.access import KubeCluster
from testbed.harness.binaries import find_binaries
from testbed.harness.cluster import repository_root

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


def kubectl(*args: str, home: Path, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    program = find_binaries(repository_root(), os.environ).kubectl
    env = {
        # kubectl looks plugins up on PATH: the package's bin folder, then the system's.
        "PATH": f"{BIN}:{program.parent}:/usr/bin:/bin",
        "HOME": str(home),
        "KUBECONFIG": str(kubeconfig),
    }
    return subprocess.run(
        [str(program), *args], capture_output=True, text=True, check=False, env=env, timeout=120
    )


def test_kubectl_finds_and_runs_gpuctl_as_its_plugin(
    kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    where = {"home": tmp_path, "kubeconfig": kube_cluster.kubeconfig}
    listed = kubectl("plugin", "list", **where)
    assert listed.returncode == 0, listed.stderr
    assert str(BIN / "kubectl-gpuctl") in listed.stdout
    version = kubectl("gpuctl", "version", "--namespace", namespace, "-o", "json", **where)
    assert version.returncode == 0, version.stderr
    assert json.loads(version.stdout)["client"] == gpuctl_version()
    # The plugin reads the cluster kubectl points at (KUBECONFIG), and takes its own flags.
    nodes = kubectl("gpuctl", "nodes", "-o", "name", "--request-timeout", "30", **where)
    assert nodes.returncode == 0, nodes.stderr
    refused = kubectl("gpuctl", "nodes", "-o", "nonsense", **where)
    assert refused.returncode == 2
    assert "'nonsense' is not an output format" in refused.stderr
