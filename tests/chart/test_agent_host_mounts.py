"""The agent's DaemonSet mounts exactly the host paths the agent reads (agent/host_paths.py),
each read-only and recursively read-only (beta and on by default at the chart's floor, 1.31;
GA in 1.33); /sys is writable only with agent.allowNodeChanges. Both components'
PriorityClass is a value."""

from __future__ import annotations

from typing import Any

import pytest

from agent.host_paths import AGENT_HOST_PATHS, FILE_HOST_PATHS, REQUIRED_HOST_PATHS
from tests.support.helm import Helm, HelmError, find

HOST = "/host"


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(tmp_path_factory.mktemp("helm"))


def agent_pod(rendered: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = find(rendered, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def host_mounts(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Host path -> its volumeMount, for every hostPath volume of the agent's Pod."""
    host_paths = {v["name"]: v["hostPath"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    found = {}
    for name, source in host_paths.items():
        mount = mounts[name]
        assert mount["mountPath"] == HOST + source["path"], "the host's path, under /host"
        found[source["path"]] = {**mount, "type": source["type"]}
    return found


def test_only_the_paths_the_agent_reads_are_mounted_each_read_only_and_recursively(
    helm: Helm,
) -> None:
    pod = agent_pod(helm.template())
    mounts = host_mounts(pod)
    assert list(mounts) == [f"/{relative}" for relative in AGENT_HOST_PATHS]
    assert not {"/", "/dev", "/etc", "/run"} & set(mounts)
    for host_path, mount in mounts.items():
        assert mount["readOnly"] is True, host_path
        assert mount["recursiveReadOnly"] == "IfPossible", host_path
        # recursiveReadOnly requires no propagation (the API server refuses both together).
        assert "mountPropagation" not in mount, host_path
        relative = host_path.lstrip("/")
        if relative in REQUIRED_HOST_PATHS:
            assert mount["type"] == "Directory", host_path
        elif relative in FILE_HOST_PATHS:  # /etc/modules: an empty file where there is none
            assert mount["type"] == "FileOrCreate", host_path
        else:
            assert mount["type"] == "DirectoryOrCreate", host_path
    assert pod["priorityClassName"] == "system-node-critical"


def test_allow_node_changes_makes_sys_and_only_sys_writable(helm: Helm) -> None:
    mounts = host_mounts(agent_pod(helm.template({"agent": {"allowNodeChanges": True}})))
    writable = [path for path, mount in mounts.items() if not mount.get("readOnly")]
    assert writable == ["/sys"]
    assert mounts["/sys"]["mountPropagation"] == "HostToContainer"
    assert "recursiveReadOnly" not in mounts["/sys"]


@pytest.mark.parametrize("mode", ["Enabled", "Disabled"])
def test_recursive_read_only_follows_the_value(helm: Helm, mode: str) -> None:
    mounts = host_mounts(agent_pod(helm.template({"agent": {"recursiveReadOnly": mode}})))
    for host_path, mount in mounts.items():
        assert mount["readOnly"] is True, host_path
        assert mount.get("recursiveReadOnly") == (None if mode == "Disabled" else mode), host_path


def test_priority_classes_are_values(helm: Helm) -> None:
    rendered = helm.template(
        {
            "agent": {"priorityClassName": "gpu-infra"},
            "coordinator": {"priorityClassName": "system-cluster-critical"},
        }
    )
    assert agent_pod(rendered)["priorityClassName"] == "gpu-infra"
    coordinator = find(rendered, "Deployment")["spec"]["template"]["spec"]
    assert coordinator["priorityClassName"] == "system-cluster-critical"
    defaults = helm.template()
    assert "priorityClassName" not in find(defaults, "Deployment")["spec"]["template"]["spec"]
    assert "priorityClassName" not in agent_pod(helm.template({"agent": {"priorityClassName": ""}}))


def test_an_unknown_recursive_read_only_mode_is_refused_naming_the_value(helm: Helm) -> None:
    with pytest.raises(HelmError, match="recursiveReadOnly"):
        helm.template({"agent": {"recursiveReadOnly": "Always"}})
