"""`helm upgrade` from the previous chart (the one on `main` before this change set, packaged in
tests/golden/charts/) to this one, on the real API server, with a GPUDriver the previous
release's coordinator already acts on: the upgrade applies (no immutable field changed), the
upgraded coordinator takes over with the new chart's flags, and it rewrites nothing: the
Module keeps its resourceVersion (so KMM re-rolls no node), the GPUDriver its target and the
targeted node its labels.

What is upgraded is the chart; both coordinators run this build's code (the images of the
previous release are not built here). Adjacent releases' code is the version-skew tests'.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gpuctl.common.names import STATE_LABEL
from gpuctl.gpudriver.module_spec import module_name
from testbed.cluster_api import Api, gpudriver, node_labels, simple_spec
from testbed.harness.access import KubeCluster
from testbed.harness.waiting import wait_until
from tests.support.chart_pods import running_coordinator
from tests.support.chart_release import Release

pytestmark = pytest.mark.integration

PREVIOUS = Path(__file__).resolve().parents[2] / "golden" / "charts" / "gpuctl-0.1.0-79654d1.tgz"


def target_served(release: Release, driver: str) -> bool:
    """The coordinator serving the release's metrics port has made a pass for `driver`."""
    port = release.deployment()["spec"]["template"]["spec"]["containers"][0]["ports"][1]
    url = f"http://127.0.0.1:{port['containerPort']}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return False
    return f'gpuctl_rollout_target_info{{gpudriver="{driver}"' in text


def host_paths(release: Release) -> list[str]:
    volumes = release.daemonset()["spec"]["template"]["spec"]["volumes"]
    return [v["hostPath"]["path"] for v in volumes if "hostPath" in v]


def node_state(api: Api, node: str) -> str | None:
    labels = api.kube.request("GET", f"/api/v1/nodes/{node}")["metadata"].get("labels") or {}
    return labels.get(STATE_LABEL)


def test_upgrading_the_chart_rewrites_no_module_target_or_node(
    kube_cluster: KubeCluster,
    previous_chart_release: Release,
    api: Api,
    make_node: Any,
    tmp_path: Path,
) -> None:
    release = previous_chart_release
    namespace = release.namespace
    release.install(chart=PREVIOUS)
    assert host_paths(release) == ["/"]  # the previous chart: the whole host, read-only
    node = make_node("gpu-1", node_labels(namespace)).metadata.name
    name = f"{namespace}-gpu"
    # No agent runs here: the node stays in Checking, waiting for a report, for the whole
    # check timeout, so its labels hold still across both coordinators.
    spec = {**simple_spec(namespace), "rollout": {"timeouts": {"check": "1h"}}}
    api.create_driver(gpudriver(name, namespace, spec))
    with running_coordinator(kube_cluster, release, tmp_path / "previous") as previous:
        module = wait_until(
            "the previous release's coordinator writes the Module",
            lambda: api.get_module(namespace, module_name(name)),
            timeout_seconds=120,
        )
        wait_until(
            "it has made a pass for the GPUDriver",
            lambda: target_served(release, name),
            timeout_seconds=120,
        )
        # The node the rollout holds still at: a pass has started it (Pending, then Checking).
        wait_until(
            "the previous release's coordinator has taken the node to Checking",
            lambda: node_state(api, node) == "Checking",
            timeout_seconds=120,
        )
    assert previous.exit_code == 0, previous.log_text()[-4000:]
    before = {
        "module": api.get_module(namespace, module_name(name)),
        "target": (api.get_driver(name) or {})["status"]["rollout"].get("targetVersion"),
        "node": api.kube.request("GET", f"/api/v1/nodes/{node}")["metadata"]["labels"],
    }
    assert before["module"] is not None
    assert before["module"]["metadata"]["resourceVersion"] == module["metadata"]["resourceVersion"]

    release.upgrade()
    assert "/" not in host_paths(release)  # really this chart: only the paths the agent reads
    # The rolling update's new Pod, from the upgraded template.
    upgraded_run = running_coordinator(kube_cluster, release, tmp_path / "upgraded", replica="1")
    with upgraded_run as upgraded:
        wait_until(
            "the upgraded coordinator has made a pass for the GPUDriver",
            lambda: target_served(release, name),
            timeout_seconds=120,
        )
        # A change that is not the driver's (no new Module version): once the upgraded
        # coordinator's reconciler has observed its generation, it has also written (or
        # left) the Module for it.
        changed = api.patch_driver(name, {"spec": {"rollout": {"holdAfterFirstNode": True}}})
        generation = changed["metadata"]["generation"]
        wait_until(
            f"the upgraded coordinator observes generation {generation}",
            lambda: (
                (api.get_driver(name) or {}).get("status", {}).get("observedGeneration")
                == generation
            ),
            timeout_seconds=120,
        )
        after_module = api.get_module(namespace, module_name(name))
        after_driver = api.get_driver(name) or {}
        after_node = api.kube.request("GET", f"/api/v1/nodes/{node}")["metadata"]["labels"]
    assert upgraded.exit_code == 0, upgraded.log_text()[-4000:]
    assert after_module is not None
    assert (
        after_module["metadata"]["resourceVersion"]
        == (before["module"]["metadata"]["resourceVersion"])
    ), "the upgraded coordinator rewrote the Module: KMM would re-roll every node"
    assert after_driver["status"]["rollout"].get("targetVersion") == before["target"]
    assert after_node == before["node"]
