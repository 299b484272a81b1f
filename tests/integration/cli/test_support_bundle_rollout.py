"""`gpuctl support-bundle` on a rollout stopped at a Blocked and a Failed node (issue 50): the
archive alone answers the first question about each, why it stopped.

The real coordinator, real agents on fake host roots and KMM's own operator (the rollout rig,
testbed/rollout_live): node `a` is busy (ollama holds its render node), so the rollout blocks
it; node `b`'s kernel refuses every load, so KMM's loader crash-loops and the node fails. The
bundle is then made by the real CLI, as a subprocess, for the namespace the coordinator and
KMM's Pods run in.

KMM's failed loader is not in the cluster by then: the coordinator takes its write back as it
fails the node (nothing of the driver loaded: gpuctl/rollout/step/loading.py) and KMM deletes
the loader, so no bundle could read its log (nor could one on a real cluster); what the bundle
holds of it is the coordinator's reason, which names the Pod, how it exited and how often it
restarted, in the Node's annotation, the Node's Event, the GPUDriver's status and its Event,
and KMM's NodeModulesConfig of the node, which orders and records nothing loaded. (KMM's
operator runs here as a process, not a Pod: its log is no part of this test.)
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuctl.common import names
from gpuctl.common.build_version import gpuctl_version
from testbed.harness.waiting import wait_until
from testbed.rollout_live.images import NEW, OLD
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import (
    FAST,
    TIMEOUTS,
    busy_with_ollama,
    start,
    wait_status,
)
from tests.integration.cli.test_support_bundle import read_archive, support_bundle

pytestmark = pytest.mark.integration


def described(readme: str) -> list[re.Pattern[str]]:
    """The file names README.txt describes (a name, then its description past two spaces or
    more), as patterns: `<pod>` one part of the name, `...` any path."""
    patterns = []
    for line in readme.splitlines():
        found = re.match(r"(\S+) {2,}\S", line)
        if not found:
            continue
        name = found.group(1)
        parts = re.split(r"(<[^>]+>|\.\.\.)", name)
        regex = "".join(
            "[^/]+" if p.startswith("<") else ".+" if p == "..." else re.escape(p) for p in parts
        )
        patterns.append(re.compile(regex))
    return patterns


def items(files: dict[str, bytes], name: str) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = yaml.safe_load(files[name])["items"]
    return listed


def test_the_bundle_says_why_a_node_is_blocked_and_why_another_failed(
    rollout_rig: RolloutRig, tmp_path: Path
) -> None:
    rig = rollout_rig
    quick_load = {**FAST, "timeouts": {**TIMEOUTS, "load": "10s"}}
    busy, broken = start(rig, ["a", "b"], quick_load)
    busy_with_ollama(rig, busy)
    rig.kernels.refuse_loads(broken)
    secret_value = f"do-not-ship-{rig.namespace}"
    rig.kube.request(
        "POST",
        f"/api/v1/namespaces/{rig.namespace}/secrets",
        body={
            "metadata": {"name": "signing-key", "labels": {"app.kubernetes.io/name": "gpuctl"}},
            "stringData": {"key.pem": secret_value},
        },
    )
    rig.set_version(NEW)
    rig.wait_phases({busy: "Blocked", broken: "Failed"}, timeout=120)
    status = wait_status(
        rig,
        "counts the blocked and the failed node",
        lambda s: s["counts"].get("Blocked") == 1 and s["counts"].get("Failed") == 1,
    )
    blocked_why = rig.annotation(busy, names.REASON)
    failed_why = rig.annotation(broken, names.REASON)
    assert "pid 4242 (ollama)" in blocked_why, blocked_why
    loader = f"KMM's load Pod {rig.namespace}/kmm-worker-{broken}-"
    assert loader in failed_why, failed_why
    assert "exited with code 1" in failed_why, failed_why

    # The coordinator took its write back as it failed the node: KMM deletes its loader.
    wait_until(
        f"KMM's loader on {broken} deleted",
        lambda: not rig.worker_pods(node=broken),
        timeout_seconds=60,
    )

    path = tmp_path / "bundle.tar.gz"
    done = support_bundle(rig.cluster.kubeconfig, rig.namespace, path)
    assert done.returncode == 0, done.stderr
    files = read_archive(path)
    assert files["errors.txt"] == b"", files["errors.txt"].decode()

    # The Nodes: each one's phase, the version it is about and why, as the coordinator wrote.
    nodes = {n["metadata"]["name"]: n["metadata"] for n in items(files, "nodes.yaml")}
    for node, phase, why in ((busy, "Blocked", blocked_why), (broken, "Failed", failed_why)):
        assert nodes[node]["labels"][names.STATE_LABEL] == phase
        assert nodes[node]["annotations"][names.STATE_VERSION] == rig.target()
        assert nodes[node]["annotations"][names.REASON] == why
    # The GPUDriver's status: the rollout Failed at its budget, each node with its reason.
    [driver] = [d for d in items(files, "gpudrivers.yaml") if d["metadata"]["name"] == "gpu"]
    bundled = driver["status"]["rollout"]
    assert (bundled["state"], bundled["counts"]) == (status["state"], status["counts"])
    assert {n["name"]: (n["phase"], n["reason"]) for n in bundled["nodes"]} == {
        busy: ("Blocked", blocked_why),
        broken: ("Failed", failed_why),
    }
    # The Events: the GPU nodes' (the coordinator's and KMM's), and the GPUDriver's.
    gpu_nodes = {g["metadata"]["name"] for g in items(files, "gpunodes.yaml")}
    assert {busy, broken} <= gpu_nodes
    node_events = items(files, "node-events.yaml")
    assert {e["involvedObject"]["name"] for e in node_events} <= gpu_nodes
    said = {(e["involvedObject"]["name"], e["reason"], e["message"]) for e in node_events}
    new = rig.target()
    assert (busy, "RolloutBlocked", f"{new}: Blocked: {blocked_why}") in said, said
    assert (broken, "RolloutFailed", f"{new}: Failed: {failed_why}") in said, said
    assert (broken, "ModuleUnloaded") in {(n, r) for n, r, _ in said}, said  # KMM's own
    driver_said = {(e["reason"], e["message"]) for e in items(files, "events.yaml")}
    assert ("NodeBlocked", f"node {busy}: {new}: Blocked: {blocked_why}") in driver_said
    assert ("NodeFailed", f"node {broken}: {new}: Failed: {failed_why}") in driver_said
    # KMM's record per node: the blocked node still runs the old version; the failed one
    # runs nothing of the driver, and KMM has no order left for it.
    configs = {c["metadata"]["name"]: c for c in items(files, "nodemodulesconfigs.yaml")}
    [loaded] = configs[busy]["status"]["modules"]
    assert (loaded["name"], loaded["version"]) == (rig.module, rig.kmm_version_at(OLD))
    assert not configs[broken].get("spec", {}).get("modules")
    assert not configs[broken].get("status", {}).get("modules")
    versions = yaml.safe_load(files["versions.yaml"])
    assert versions["coordinator"]["version"] == gpuctl_version()
    assert versions["agents"] == {gpuctl_version(): 2}
    # No Secret, in any form.
    encoded = base64.b64encode(secret_value.encode())
    for name, data in files.items():
        assert secret_value.encode() not in data, name
        assert encoded not in data, name
    # README.txt describes every file the archive holds.
    patterns = described(files["README.txt"].decode())
    for name in files:
        if name != "README.txt":
            assert any(p.fullmatch(name) for p in patterns), name
