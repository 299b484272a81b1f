"""`helm upgrade` from the previous chart with a rollout in flight, on KMM's real operator: the
upgraded coordinator takes the rollout over where it stood. It neither starts it again nor
re-rolls a node that is done, and the node that is blocked (a process holds its render node)
keeps its driver until it is free, then finishes with the rest.

Everything is the chart's: the previous release's coordinator and its agents play the Pods of
its Deployment and DaemonSet (tests/support/chart_pods.py), and after the upgrade, as the
rolling updates would, a coordinator Pod from the new template takes over and each agent is
replaced by a Pod from the new DaemonSet template. (All run on this one machine, where two
coordinators cannot share the chart's ports: the old Pods stop before the new ones start, as
with a Recreate strategy; a handover between two live replicas is the chaos tests'.) KMM loads
and unloads the nodes' fake kernels, which record every unload with whether the node was
busy.

What is upgraded is the chart; both coordinators run this build's code (as in
test_upgrade_from_previous.py).
"""

from __future__ import annotations

import contextlib
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuctl.common import names
from gpuctl.gpudriver.module_spec import module_name
from testbed.cluster_api import Api, gpudriver, mapped_image, node_labels, simple_spec
from testbed.fakehost.scenarios import B580
from testbed.harness.access import KubeCluster
from testbed.harness.rbac_grants import granted, service_account
from testbed.harness.waiting import wait_until
from testbed.rollout_live.scenario import FAST
from tests.integration.chart.test_helm_test import gpunode_session
from tests.integration.chart.test_upgrade_from_previous import PREVIOUS
from tests.support.chart_pods import running_agent, running_coordinator
from tests.support.chart_release import Release
from tests.support.gpu_nodes import GpuNodes

pytestmark = pytest.mark.integration

FIRST, SECOND = mapped_image("1.0"), mapped_image("2.0")
CLIENT_PID = 4242


def target(api: Api, driver: str) -> str:
    status = (api.get_driver(driver) or {}).get("status") or {}
    return str((status.get("rollout") or {}).get("targetVersion") or "")


def states(api: Api, nodes: list[str]) -> dict[str, str]:
    """Each node's "<phase> <version>" (one read of the Node each)."""
    found = {}
    for node in nodes:
        meta = api.kube.request("GET", f"/api/v1/nodes/{node}")["metadata"]
        phase = (meta.get("labels") or {}).get(names.STATE_LABEL, "")
        found[node] = f"{phase} {(meta.get('annotations') or {}).get(names.STATE_VERSION, '')}"
    return found


def annotation(api: Api, node: str, key: str) -> str:
    meta = api.kube.request("GET", f"/api/v1/nodes/{node}")["metadata"]
    return str((meta.get("annotations") or {}).get(key, ""))


def since(api: Api, node: str) -> str:
    return annotation(api, node, names.SINCE)


def served_phases(release: Release, driver: str) -> dict[str, str]:
    """node -> phase, as the coordinator serving the release's metrics port last passed over
    the GPUDriver's rollout (gpuctl_node_rollout_phase); {} before its first pass."""
    port = release.deployment()["spec"]["template"]["spec"]["containers"][0]["ports"][1]
    url = f"http://127.0.0.1:{port['containerPort']}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    return {
        sample.labels["node"]: sample.labels["phase"]
        for family in text_string_to_metric_families(text)
        if family.name == "gpuctl_node_rollout_phase"
        for sample in family.samples
        if sample.labels.get("gpudriver") == driver and sample.value == 1
    }


def agents_connected(api: Api, nodes: list[str]) -> bool:
    """Every node's GPUNode says its agent is connected with a fresh report."""
    return all(gpunode_session(api.kube, node) == ("Connected", True) for node in nodes)


# What this build's coordinator needs that the previous chart did not grant.
THIS_BUILD_NEEDS = [
    {
        "apiGroups": [names.KMM_GROUP],
        "resources": [names.KMM_NODE_CONFIG_PLURAL],
        "verbs": ["list", "watch"],
    },
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]},
]


def wait_states(api: Api, driver: str, wanted: dict[str, str], logs: list[Path]) -> str:
    """Until each node is in its phase about the GPUDriver's target (which must be set);
    returns that target. On a timeout, the states and the coordinators' logs say why."""

    def check() -> str | None:
        about = target(api, driver)
        now = states(api, list(wanted))
        return about if about and now == {n: f"{p} {about}" for n, p in wanted.items()} else None

    try:
        return wait_until(f"phases {wanted}", check, timeout_seconds=180)
    except AssertionError as err:
        tails = "\n".join(log.read_text(errors="replace")[-3000:] for log in logs if log.exists())
        raise AssertionError(f"{err}\nnow: {states(api, list(wanted))}\nlogs:\n{tails}") from None


def test_a_helm_upgrade_mid_rollout_restarts_nothing_and_re_rolls_no_done_node(
    *,
    kube_cluster: KubeCluster,
    previous_chart_release: Release,
    api: Api,
    gpu_nodes: GpuNodes,
    namespace: str,
    tmp_path: Path,
) -> None:
    release = previous_chart_release
    release.install(chart=PREVIOUS)
    nodes = [gpu_nodes.add(short, node_labels(namespace)) for short in ("a", "b", "c")]
    first, busy, last = nodes
    driver = f"{namespace}-gpu"
    rollout = {**FAST, "maxUnavailable": 1}
    api.create_driver(
        gpudriver(driver, namespace, {**simple_spec(namespace, FIRST), "rollout": rollout})
    )
    previous_log = tmp_path / "previous" / "coordinator.log"
    upgraded_log = tmp_path / "upgraded" / "coordinator.log"
    logs = [previous_log, upgraded_log]

    with contextlib.ExitStack() as previous_pods:
        # The previous chart's coordinator ran the previous code; this build's reads KMM's
        # NodeModulesConfigs (a node is Done only on KMM's record of this boot) and makes
        # image probe Pods, which its own chart grants (coordinator/policies/rbac.py).
        account = release.deployment()["spec"]["template"]["spec"]["serviceAccountName"]
        previous_pods.enter_context(
            granted(
                api.kube,
                f"{namespace}-this-build",
                THIS_BUILD_NEEDS,
                service_account(release.namespace, account),
            )
        )
        previous = previous_pods.enter_context(
            running_coordinator(kube_cluster, release, tmp_path / "previous")
        )
        wait_until(
            "the coordinator publishes its CA", release.ca_configmap_or_none, timeout_seconds=120
        )
        for node in nodes:
            previous_pods.enter_context(
                running_agent(
                    kube_cluster, release, node, gpu_nodes.hosts[node], tmp_path / "agents"
                )
            )
        loaded = wait_states(api, driver, dict.fromkeys(nodes, "Done"), logs)

        # A process holds the middle node's render node; the version moves on.
        host = gpu_nodes.hosts[busy]
        host.add_process(CLIENT_PID, "ollama")
        host.add_drm_fd(CLIENT_PID, 5, "renderD128", pdev=B580, client_id=7)
        host.write("sys/module/xe/refcnt", "1\n")
        api.patch_driver(driver, {"spec": {"kernelModule": {"kernelMappings": [
            {"regexp": "^.+$", "containerImage": SECOND}
        ]}}})  # fmt: skip
        in_flight = {first: "Done", busy: "Blocked", last: "Done"}
        rolled = wait_states(api, driver, in_flight, logs)
        assert rolled != loaded
        assert f"pid {CLIENT_PID} (ollama)" in annotation(api, busy, names.REASON)
        since_before = {node: since(api, node) for node in nodes}
        loads_before = {node: len(gpu_nodes.kmm.load_calls(node)) for node in nodes}
        module_before = api.get_module(namespace, module_name(driver))
        assert module_before is not None
    assert previous.exit_code == 0, previous.log_text()[-4000:]

    release.upgrade()
    with contextlib.ExitStack() as upgraded_pods:
        upgraded = upgraded_pods.enter_context(
            running_coordinator(kube_cluster, release, tmp_path / "upgraded", replica="1")
        )
        for node in nodes:
            upgraded_pods.enter_context(
                running_agent(
                    kube_cluster,
                    release,
                    node,
                    gpu_nodes.hosts[node],
                    tmp_path / "agents",
                    replica="1",
                )
            )
        # The upgraded coordinator (the only one serving the chart's metrics port now) has
        # passed over the rollout as it stood, with every new agent connected to it.
        wait_until(
            "the upgraded coordinator's pass sees the rollout in flight, all agents connected",
            lambda: served_phases(release, driver) == in_flight and agents_connected(api, nodes),
            timeout_seconds=120,
        )
        assert f"pid {CLIENT_PID} (ollama)" in annotation(api, busy, names.REASON)
        done = (first, last)
        assert states(api, nodes) == {n: f"{p} {rolled}" for n, p in in_flight.items()}
        assert {n: since(api, n) for n in done} == {n: since_before[n] for n in done}, (
            "the upgraded coordinator rolled a done node again"
        )
        assert {n: len(gpu_nodes.kmm.load_calls(n)) for n in nodes} == loads_before
        module = api.get_module(namespace, module_name(driver))
        assert module is not None
        assert module["metadata"]["generation"] == module_before["metadata"]["generation"]
        assert module["spec"] == module_before["spec"]

        # The client lets go: the blocked node finishes at the same target, and only it loads.
        host.remove_process(CLIENT_PID)
        host.write("sys/module/xe/refcnt", "0\n")
        assert wait_states(api, driver, dict.fromkeys(nodes, "Done"), logs) == rolled
        assert "2.0" in gpu_nodes.live_version(busy)
        loads = {n: len(gpu_nodes.kmm.load_calls(n)) for n in nodes}
        assert {n: loads[n] for n in done} == {n: loads_before[n] for n in done}
        assert loads[busy] > loads_before[busy]
        assert {n: since(api, n) for n in done} == {n: since_before[n] for n in done}
    assert upgraded.exit_code == 0, upgraded.log_text()[-4000:]
    gpu_nodes.kmm.assert_no_unload_while_busy()
