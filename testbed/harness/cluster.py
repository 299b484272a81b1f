"""Local Kubernetes control plane: ``python -m testbed.harness.cluster up|down`` (``hack/cluster``).

``up`` starts etcd, kube-apiserver and kube-controller-manager on free loopback ports with
their data in a new temporary folder, installs KMM's Module CRD and the project's CRDs, waits
until they are served, records the cluster in ``$GPUCTL_CLUSTER_STATE`` (default
``~/.cache/gpuctl/cluster/state.json``) and prints the admin kubeconfig path. Running ``up``
again while that cluster runs prints the same path. ``down`` stops it and removes its data.

``start_cluster`` is the same start for the pytest fixtures (``tests/integration/conftest.py``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from testbed.harness import processes
from testbed.harness.access import KubeCluster
from testbed.harness.binaries import NEWEST, KubeRelease, find_binaries
from testbed.harness.control_plane import ControlPlane, start_control_plane
from testbed.harness.crds import install_crds, project_crd_paths
from testbed.harness.kmm_build import find_kmm
from testbed.harness.layout import Layout
from testbed.harness.ports import pick_ports

STATE_ENV = "GPUCTL_CLUSTER_STATE"


def repository_root() -> Path:
    return Path(__file__).resolve().parents[2]


def default_state_file(environ: Mapping[str, str]) -> Path:
    if environ.get(STATE_ENV):
        return Path(environ[STATE_ENV])
    cache = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "gpuctl" / "cluster" / "state.json"


def start_cluster(
    root: Path,
    repo_root: Path,
    environ: Mapping[str, str],
    now: datetime.datetime,
    *,
    die_with_parent: bool,
    release: KubeRelease = NEWEST,
) -> tuple[ControlPlane, KubeCluster]:
    """Starts a control plane of `release` under ``root`` with every CRD installed and served."""
    crd_paths = [*find_kmm(repo_root, environ).crds(), *project_crd_paths(repo_root)]
    binaries = find_binaries(repo_root, environ, release)
    control_plane = start_control_plane(
        root, binaries, pick_ports(), now, die_with_parent=die_with_parent
    )
    try:
        cluster = KubeCluster(control_plane.layout, control_plane.server)
        with cluster.admin_client() as api_client:
            install_crds(api_client, crd_paths)
    except BaseException:
        control_plane.stop()
        raise
    return control_plane, cluster


def _read_state(state_file: Path) -> dict[str, object] | None:
    try:
        state: dict[str, object] = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return None
    return state


def _recorded_components(state: Mapping[str, object]) -> list[tuple[int, list[str]]]:
    components = state.get("components")
    if not isinstance(components, list):
        return []
    return [(int(c["pid"]), [str(a) for a in c["argv"]]) for c in components]


def _all_running(state: Mapping[str, object]) -> bool:
    recorded = _recorded_components(state)
    return bool(recorded) and all(processes.command_line(pid) == argv for pid, argv in recorded)


def up(state_file: Path, repo_root: Path, environ: Mapping[str, str]) -> Path:
    """Starts the recorded local cluster unless it runs; returns its admin kubeconfig."""
    state = _read_state(state_file)
    if state is not None and _all_running(state):
        return Layout(Path(str(state["root"]))).admin_kubeconfig
    if state is not None:
        down(state_file)
    root = Path(tempfile.mkdtemp(prefix="gpuctl-cluster-"))
    try:
        control_plane, cluster = start_cluster(
            root, repo_root, environ, datetime.datetime.now(datetime.UTC), die_with_parent=False
        )
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    cluster.close_clients()
    state_file.parent.mkdir(parents=True, exist_ok=True)
    state_file.write_text(
        json.dumps(
            {
                "root": str(root),
                "server": control_plane.server,
                "kubeconfig": str(cluster.kubeconfig),
                "components": [c.record() for c in control_plane.components],
            },
            indent=2,
        )
    )
    return cluster.kubeconfig


def down(state_file: Path) -> None:
    """Stops the recorded local cluster (if any) and removes its data and state."""
    state = _read_state(state_file)
    if state is not None:
        for pid, argv in reversed(_recorded_components(state)):
            processes.stop_recorded(pid, argv)
        root = state.get("root")
        if isinstance(root, str) and Path(root).name.startswith("gpuctl-cluster-"):
            shutil.rmtree(root, ignore_errors=True)
    state_file.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/cluster", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["up", "down"])
    args = parser.parse_args(argv)
    environ = dict(os.environ)
    state_file = default_state_file(environ)
    if args.command == "up":
        print(up(state_file, repository_root(), environ))
    else:
        down(state_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
