"""The installed `gpuctl` against the real API server: nodes, node inspect, rollout commands.

The objects the coordinator would write (GPUNode status, GPUDriver status.rollout, the KMM
Module) are written here by the test as admin, so these tests pin the CLI's side of those
contracts; the coordinator's side is tested with the coordinator.
"""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import json_format

from coordinator.policies.rbac import COORDINATOR_LEASE, VIEW_RULES
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.common import names
from gpuctl.crds.gpudriver import ROLLOUT_PHASES
from gpuctl.gpudriver.module_spec import kmm_version
from testbed.cluster_api import TEST_LABEL, Api, gpudriver, node_labels, simple_spec
from testbed.harness.access import KubeCluster
from testbed.harness.rbac_grants import granted, service_account, user
from tests.support.rollout_samples import NOT_ENFORCING

pytestmark = pytest.mark.integration

GPUCTL = str(Path(sys.executable).parent / "gpuctl")
GPUNODES = (names.GROUP, names.VERSION, names.GPUNODE_PLURAL)
STATE_LABEL = names.STATE_LABEL
GPUNODE_PATH = "/apis/gpuctl.dev/v1alpha1/gpunodes"


def gpuctl(
    kubeconfig: Path | str, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GPUCTL, *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


@pytest.fixture(autouse=True)
def _remove_test_gpunodes(api: Api, namespace: str) -> Iterator[None]:
    yield
    for item in api.kube.request("GET", "/apis/gpuctl.dev/v1alpha1/gpunodes").get("items", []):
        if item["metadata"]["name"].startswith(f"{namespace}-"):
            api.kube.request(
                "DELETE", f"/apis/gpuctl.dev/v1alpha1/gpunodes/{item['metadata']['name']}"
            )


def _report(node: str, *, busy: bool = False) -> dict[str, Any]:
    report = pb.NodeReport(node_name=node, kernel_release="6.8.0-60-generic")
    report.devices.add(
        pci_address="0000:03:00.0", device_id="0xe20b", driver="xe", role=pb.Device.STANDALONE
    )
    report.module.CopyFrom(
        pb.Module(name="xe", state=pb.Module.LIVE, backport_tag="xeb_v7.1.4.6_260728.7")
    )
    report.client_scan.state = pb.ClientScan.COMPLETE
    # What an agent on a BIOS-booted node says of module signatures: not enforced (an
    # agent that cannot tell would block the load, gpuctl/rollout/step/preflight.py).
    report.kernel_trust.CopyFrom(NOT_ENFORCING)
    if busy:
        report.devices[0].clients.add(pid=4242, command="ollama", client_ids=[7])
        report.blockers.add(
            reason=pb.Blocker.OPEN_CLIENTS,
            pci_address="0000:03:00.0",
            message="1 process holds 0000:03:00.0 open (1 DRM client): pid 4242 (ollama)",
        )
    return json_format.MessageToDict(report)


def put_gpunode(api: Api, node: str, status: dict[str, Any]) -> None:
    base = "/apis/gpuctl.dev/v1alpha1/gpunodes"
    api.kube.request(
        "POST",
        base,
        body={"apiVersion": "gpuctl.dev/v1alpha1", "kind": "GPUNode", "metadata": {"name": node}},
    )
    api.kube.request(
        "PATCH",
        f"{base}/{node}/status",
        body={"status": status},
        content_type="application/merge-patch+json",
    )


def connected(node: str, *, busy: bool = False) -> dict[str, Any]:
    return {
        "session": "Connected",
        "agentVersion": "0.1.0",
        "reportReceivedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "report": _report(node, busy=busy),
    }


def token_kubeconfig(cluster: KubeCluster, token: str, path: Path) -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": cluster.server,
                            "certificate-authority": str(cluster.ca_cert),
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path


def test_nodes_lists_reported_nodes_and_flags_the_disconnected_one(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    idle, busy, gone = (f"{namespace}-{n}" for n in ("idle", "busy", "gone"))
    put_gpunode(api, idle, connected(idle))
    put_gpunode(api, busy, connected(busy, busy=True))
    put_gpunode(api, gone, dict(connected(gone), session="Disconnected"))
    done = gpuctl(kube_cluster.kubeconfig, "nodes")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:]}
    assert rows[idle][1:5] == ["1", "xe", "xeb_v7.1.4.6_260728.7", "none"]
    assert rows[busy][4:6] == ["1:", "OPEN_CLIENTS"]
    assert rows[gone][4] == "unknown"
    assert rows[gone][-1] == "disconnected"
    # -o json: the GPUNodes as the API server serves them; -o name for scripts.
    listed = json.loads(gpuctl(kube_cluster.kubeconfig, "nodes", "-o", "json").stdout)
    served = api.kube.request("GET", GPUNODE_PATH)["items"]
    assert listed["kind"] == "List"
    ours = {idle, busy, gone}
    assert [i for i in listed["items"] if i["metadata"]["name"] in ours] == [
        i for i in served if i["metadata"]["name"] in ours
    ]
    named = gpuctl(kube_cluster.kubeconfig, "nodes", "-o", "name").stdout.splitlines()
    assert {f"gpunode.gpuctl.dev/{n}" for n in ours} <= set(named)
    # kubectl's templates over the same objects.
    template = '{range .items[*]}{.metadata.name}{"\\n"}{end}'
    printed = gpuctl(kube_cluster.kubeconfig, "nodes", "-o", f"jsonpath={template}")
    assert ours <= set(printed.stdout.splitlines()), printed.stderr
    columns = gpuctl(
        kube_cluster.kubeconfig,
        "nodes",
        "-o",
        "custom-columns=NODE:.metadata.name,RV:.metadata.resourceVersion",
        "--no-headers",
    )
    versions = dict(line.split() for line in columns.stdout.splitlines())
    assert {
        i["metadata"]["name"]: i["metadata"]["resourceVersion"]
        for i in listed["items"]
        if i["metadata"]["name"] in ours
    } == {n: versions[n] for n in ours}
    bad = gpuctl(kube_cluster.kubeconfig, "nodes", "-o", "jsonpath={.items")
    assert bad.returncode == 2
    assert "jsonpath={.items: the { at 0 is not closed" in bad.stderr, bad.stderr


def test_nodes_selects_by_the_nodes_labels_and_drops_the_headers_for_scripts(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    """-l matches the Nodes' labels (as kubectl's), --no-headers leaves the rows alone; a
    selector the API server cannot parse is said, exit 1."""
    pool = "gpuctl.test/pool"
    wanted, other = f"{namespace}-a", f"{namespace}-b"
    for node, label in ((wanted, "a"), (other, "b")):
        put_gpunode(api, node, connected(node))
        body = {"metadata": {"name": node, "labels": {pool: f"{namespace}-{label}"}}}
        api.kube.request("POST", "/api/v1/nodes", body=body)
    try:
        chosen = gpuctl(
            kube_cluster.kubeconfig, "nodes", "-l", f"{pool}={namespace}-a", "--no-headers"
        )
        assert chosen.returncode == 0, chosen.stderr
        assert [line.split()[0] for line in chosen.stdout.splitlines()] == [wanted]
        named = gpuctl(
            kube_cluster.kubeconfig, "nodes", "-l", f"{pool}!={namespace}-a", "-o", "name"
        )
        assert f"gpunode.gpuctl.dev/{other}" in named.stdout.splitlines()
        assert f"gpunode.gpuctl.dev/{wanted}" not in named.stdout
        bad = gpuctl(kube_cluster.kubeconfig, "nodes", "-l", "pool in (")
        assert bad.returncode == 1
        assert "nodes matching 'pool in ('" in bad.stderr, bad.stderr
    finally:
        for node in (wanted, other):
            api.kube.request("DELETE", f"/api/v1/nodes/{node}")
            api.kube.request("DELETE", f"{GPUNODE_PATH}/{node}")


# Runs the command as a terminal's foreground job gets it: SIGINT at its default, so Ctrl-C
# reaches it. A test run started as a background job (`.ci/run &`) has SIGINT ignored, and
# its children inherit that through exec.
AT_A_TERMINAL = (
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])",
)


class Lines:
    """A running command's stdout, line by line, read on a thread: `next(pattern)` waits for
    the next line that matches, so the test waits for the exact change it made."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.seen: queue.Queue[str] = queue.Queue()
        self.read: list[str] = []
        assert process.stdout is not None
        stream = process.stdout
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: Iterable[str]) -> None:
        for line in stream:
            self.seen.put(line)

    def next(self, pattern: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.seen.get(timeout=left)
            except queue.Empty:
                break
            self.read.append(line)
            if re.search(pattern, line):
                return line
        raise AssertionError(f"no line matching {pattern!r}; read:\n{''.join(self.read)}")


def test_nodes_watch_prints_each_change_until_interrupted(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    """`gpuctl nodes -w`, as `kubectl get -w`: the list, then a line per change (an agent
    going silent, a node added, one deleted), the change's type in front with
    --output-watch-events; -n is taken and said to narrow nothing; Ctrl-C ends it, 130."""
    first, second = f"{namespace}-first", f"{namespace}-second"
    put_gpunode(api, first, connected(first))
    process = subprocess.Popen(
        [
            *AT_A_TERMINAL,
            *(GPUCTL, "nodes", "-w", "--output-watch-events", "-n", "gpuctl-system"),
            *("--kubeconfig", str(kube_cluster.kubeconfig)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = Lines(process)
        assert lines.next(r"^EVENT\s+NODE\s+GPUS").split()[:3] == ["EVENT", "NODE", "GPUS"]
        assert lines.next(rf"^ADDED\s+{first}\s").split()[-1] == "connected"
        put_gpunode(api, second, connected(second, busy=True))
        added = lines.next(rf"^ADDED\s+{second}\s")
        # The patch of its status follows the create: the report, busy.
        assert "OPEN_CLIENTS" in lines.next(rf"^MODIFIED\s+{second}\s.*OPEN_CLIENTS"), added
        api.kube.request(
            "PATCH",
            f"{GPUNODE_PATH}/{first}/status",
            body={"status": {"session": "Disconnected"}},
            content_type="application/merge-patch+json",
        )
        silent = lines.next(rf"^MODIFIED\s+{first}\s").split()
        assert silent[-1] == "disconnected"
        assert "unknown" in silent  # its blockers: no longer vouched for
        api.kube.request("DELETE", f"{GPUNODE_PATH}/{second}")
        lines.next(rf"^DELETED\s+{second}\s")
    finally:
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()  # never left behind for the next test to find
            process.communicate()
            raise
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "note: GPU nodes belong to no namespace; -n gpuctl-system narrows nothing" in stderr
    refused = gpuctl(kube_cluster.kubeconfig, "nodes", "-w", "--kernel-check")
    assert refused.returncode == 1
    assert "--watch follows the node list: not with --kernel-check" in refused.stderr


def test_node_inspect_names_each_gpu_client_by_the_pod_the_api_server_lists_on_the_node(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    """The report carries the client's pod UID (agent/cgroup_owner.py); `gpuctl node
    inspect` lists the node's pods and names the pod and its controller."""
    node = f"{namespace}-daemon"
    pod = api.kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        body={
            "metadata": {
                "name": "xpumanager-7x2kq",
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": "xpumanager",
                        "uid": "00000000-0000-4000-8000-000000000001",
                        "controller": True,
                    }
                ],
            },
            "spec": {"nodeName": node, "containers": [{"name": "xpumd", "image": "xpumd:1"}]},
        },
    )
    status = connected(node)
    owner = {"kind": "POD", "podUid": pod["metadata"]["uid"], "containerId": "c0ffee"}
    status["report"]["devices"][0]["clients"] = [
        {"pid": 4242, "command": "xpumd", "clientIds": ["7"], "owner": owner}
    ]
    put_gpunode(api, node, status)
    table = gpuctl(kube_cluster.kubeconfig, "node", "inspect", node)
    assert table.returncode == 0, table.stderr
    assert (
        f"pod {namespace}/xpumanager-7x2kq (DaemonSet {namespace}/xpumanager), pid 4242 (xpumd)"
        in table.stdout
    ), table.stdout


def test_node_inspect_shows_the_stored_report_and_json_is_the_contract(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    busy = f"{namespace}-busy"
    put_gpunode(api, busy, connected(busy, busy=True))
    table = gpuctl(kube_cluster.kubeconfig, "node", "inspect", busy)
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith("Agent connected, report received ")
    assert "pid 4242 (ollama)" in table.stdout
    as_json = gpuctl(kube_cluster.kubeconfig, "node", "inspect", busy, "-o", "json")
    assert json.loads(as_json.stdout)["devices"][0]["clients"][0]["pid"] == 4242
    missing = gpuctl(kube_cluster.kubeconfig, "node", "inspect", f"{namespace}-nope")
    assert missing.returncode == 1
    assert missing.stderr == (
        f'gpuctl: no GPU node "{namespace}-nope": no agent has reported for it '
        "(see `gpuctl nodes`)\n"
    )


def test_fresh_gives_up_with_a_clear_error_when_nobody_answers(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    node = f"{namespace}-idle"
    put_gpunode(api, node, connected(node))
    done = gpuctl(kube_cluster.kubeconfig, "node", "inspect", node, "--fresh", "--timeout", "2")
    assert done.returncode == 1
    assert "no fresh report" in done.stderr
    assert "within 2s" in done.stderr
    stored = api.kube.request("GET", f"/apis/gpuctl.dev/v1alpha1/gpunodes/{node}")
    assert stored["spec"]["inspectRequest"]["id"], "the request was written for the coordinator"


def test_fresh_reports_the_coordinators_inspect_error(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    """Play the coordinator: answer the request with an error, as it does for a gone agent."""
    node = f"{namespace}-idle"
    put_gpunode(api, node, connected(node))
    process = subprocess.Popen(
        [
            GPUCTL,
            "node",
            "inspect",
            node,
            "--fresh",
            "--timeout",
            "30",
            "--kubeconfig",
            str(kube_cluster.kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    path = f"/apis/gpuctl.dev/v1alpha1/gpunodes/{node}"
    deadline = time.monotonic() + 20
    request_id = None
    while request_id is None and time.monotonic() < deadline:
        request_id = (
            (api.kube.request("GET", path).get("spec") or {}).get("inspectRequest", {}).get("id")
        )
        time.sleep(0.1)
    assert request_id
    api.kube.request(
        "PATCH",
        f"{path}/status",
        body={
            "status": {
                "answeredInspectRequest": request_id,
                "inspectError": "the agent is not connected",
            }
        },
        content_type="application/merge-patch+json",
    )
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 1
    assert stderr == (
        f'gpuctl: the coordinator could not get a fresh report for "{node}": '
        "the agent is not connected\n"
    )


def test_a_user_without_rbac_is_told_so(
    kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    token = kube_cluster.service_account_token(namespace, "default")
    kubeconfig = token_kubeconfig(kube_cluster, token, tmp_path / "kubeconfig")
    done = gpuctl(kubeconfig, "nodes")
    assert done.returncode == 1
    assert done.stderr.startswith("gpuctl: you are not allowed to list gpunodes.gpuctl.dev: ")
    status = gpuctl(kubeconfig, "rollout", "status", "anything")
    assert status.returncode == 1
    assert status.stderr.startswith("gpuctl: you are not allowed to get gpudrivers.gpuctl.dev: ")


def _versioned_driver(api: Api, namespace: str, name: str, rollout: dict[str, Any] | None) -> None:
    spec = simple_spec(namespace)
    spec["kernelModule"]["version"] = "v2"
    api.create_driver(gpudriver(name, namespace, spec))
    if rollout is not None:
        api.kube.request(
            "PATCH",
            f"{api.driver_path(name)}/status",
            body={"status": {"rollout": rollout}},
            content_type="application/merge-patch+json",
        )


def set_rollout(api: Api, name: str, rollout: dict[str, Any]) -> None:
    """status.rollout as the coordinator writes it (a merge patch)."""
    api.kube.request(
        "PATCH",
        f"{api.driver_path(name)}/status",
        body={"status": {"rollout": rollout}},
        content_type="application/merge-patch+json",
    )


def watching(kube_cluster: KubeCluster, name: str) -> subprocess.Popen[str]:
    """`gpuctl rollout status NAME -w`, running."""
    return subprocess.Popen(
        [GPUCTL, "rollout", "status", name, "-w", "--kubeconfig", str(kube_cluster.kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _rollout(state: str, updated: int, nodes: list[dict[str, str]]) -> dict[str, Any]:
    # Every phase, as the coordinator writes them (a merge patch keeps the ones left out).
    counts = dict.fromkeys(ROLLOUT_PHASES, 0)
    counts["Done"] = updated
    for node in nodes:
        counts[node["phase"]] = counts.get(node["phase"], 0) + 1
    return {
        "targetVersion": "v2",
        "state": state,
        "total": 3,
        "updated": updated,
        "progress": f"{updated}/3",
        "counts": counts,
        "nodes": nodes,
        "startedAt": "2026-11-29T11:00:00Z",
    }


BLOCKED_NODE = {
    "name": "w3",
    "phase": "Blocked",
    "reason": "pid 4242 (ollama) holds 0000:03:00.0",
    "since": "2026-11-29T11:05:00Z",
}
LOADING_NODE = {
    "name": "w3",
    "phase": "Loading",
    "reason": "nothing holds the devices; KMM loads v2",
    "since": "2026-11-29T11:05:00Z",
}


def test_rollout_status_exit_codes_follow_the_state(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    name = f"{namespace}-gpu"
    _versioned_driver(api, namespace, name, _rollout("Progressing", 2, [BLOCKED_NODE]))
    progressing = gpuctl(kube_cluster.kubeconfig, "rollout", "status", name)
    assert progressing.returncode == 3, progressing.stderr
    assert progressing.stdout.startswith(
        f"Rollout of {name} to v2: Progressing, 2 of 3 nodes updated"
    )
    assert "pid 4242 (ollama) holds 0000:03:00.0" in progressing.stdout
    as_json = gpuctl(kube_cluster.kubeconfig, "rollout", "status", name, "-o", "json")
    assert as_json.returncode == 3  # the same exit code as the text
    assert json.loads(as_json.stdout) == api.kube.request("GET", api.driver_path(name))
    printed = gpuctl(
        kube_cluster.kubeconfig, "rollout", "status", name, "-o", "jsonpath={.status.rollout.state}"
    )
    assert (printed.returncode, printed.stdout) == (3, "Progressing")
    named = gpuctl(kube_cluster.kubeconfig, "rollout", "status", name, "-o", "name")
    assert named.stdout == f"gpudriver.gpuctl.dev/{name}\n"
    history = gpuctl(kube_cluster.kubeconfig, "rollout", "history", name, "-o", "yaml")
    assert history.returncode == 0, history.stderr
    assert yaml.safe_load(history.stdout) == []  # no revision recorded in this test
    for state, code in (("Complete", 0), ("Failed", 1)):
        api.kube.request(
            "PATCH",
            f"{api.driver_path(name)}/status",
            body={"status": {"rollout": {"state": state}}},
            content_type="application/merge-patch+json",
        )
        assert gpuctl(kube_cluster.kubeconfig, "rollout", "status", name).returncode == code


def test_rollout_status_watch_follows_until_complete(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    name = f"{namespace}-gpu"
    _versioned_driver(api, namespace, name, _rollout("Progressing", 2, [LOADING_NODE]))
    process = subprocess.Popen(
        [
            GPUCTL,
            "rollout",
            "status",
            name,
            "--watch",
            "--timeout",
            "60",
            "--kubeconfig",
            str(kube_cluster.kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    assert "Progressing, 2 of 3 nodes updated" in first
    set_rollout(api, name, _rollout("Complete", 3, []))
    rest, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert "Complete, 3 of 3 nodes updated" in rest


def test_rollout_status_watch_ends_where_the_rollout_waits_for_a_person(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    """The README's quick start: `--watch` after the first node would wait for ever on a
    rollout held after it; it ends, exit 4, saying the command that lets the rest go, as it
    does for a rollout with every node left Blocked."""
    name = f"{namespace}-gpu"
    _versioned_driver(api, namespace, name, _rollout("Progressing", 0, [LOADING_NODE]))
    process = watching(kube_cluster, name)
    assert process.stdout is not None
    assert "Progressing, 0 of 3 nodes updated" in process.stdout.readline()
    held = {**_rollout("Held", 1, []), "holdKind": "AfterFirstNode"}
    set_rollout(api, name, held)
    rest, stderr = process.communicate(timeout=60)
    assert process.returncode == 4, stderr
    assert "Held, 1 of 3 nodes updated" in rest
    assert "left, at " in rest  # the estimate from the node done
    assert rest.rstrip().endswith(
        f"waiting for you: held after its first node: check it, then "
        f"`gpuctl rollout resume {name}` for the rest"
    )
    set_rollout(api, name, _rollout("Progressing", 2, [BLOCKED_NODE]))
    blocked = gpuctl(kube_cluster.kubeconfig, "rollout", "status", name, "--watch")
    assert blocked.returncode == 4, blocked.stderr
    assert "waiting for you: every node left is Blocked" in blocked.stdout
    assert "pid 4242 (ollama) holds 0000:03:00.0" in blocked.stdout


def test_rollout_status_watch_waits_for_the_coordinator_after_a_resume_and_a_first_apply(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    """A watch started right after `gpuctl rollout resume` reads the held status the
    coordinator has not rewritten yet: the resume is there (the resumed-version annotation at
    the target), so it waits for the coordinator's pass rather than ending on the hold. A
    watch started right after `kubectl apply`, before any status, waits for the first."""
    name = f"{namespace}-gpu"
    _versioned_driver(api, namespace, name, None)
    process = watching(kube_cluster, name)
    assert process.stdout is not None
    assert process.stdout.readline() == f"waiting for the coordinator's first status of {name}\n"
    held = {**_rollout("Held", 1, []), "holdKind": "AfterFirstNode"}
    target = held["targetVersion"]
    api.kube.request(
        "PATCH",
        api.driver_path(name),
        body={"metadata": {"annotations": {names.RESUMED_VERSION: target}}},
        content_type="application/merge-patch+json",
    )
    set_rollout(api, name, held)
    assert "Held, 1 of 3 nodes updated" in process.stdout.readline()
    set_rollout(api, name, _rollout("Complete", 3, []))
    rest, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert "waiting for you" not in rest
    assert "Complete, 3 of 3 nodes updated" in rest


def test_rollout_status_watch_waits_for_the_coordinator_after_a_retry(
    kube_cluster: KubeCluster, namespace: str, api: Api, make_node: Any
) -> None:
    """Every node left Blocked, but one's Node says Pending (`gpuctl rollout retry` just put
    it back; the coordinator has not written the status since): the watch waits for the
    coordinator rather than ending on the old status."""
    name = f"{namespace}-gpu"
    node = make_node("w3", {STATE_LABEL: "Pending"})
    blocked = {**BLOCKED_NODE, "name": node.metadata.name}
    _versioned_driver(api, namespace, name, _rollout("Progressing", 2, [blocked]))
    process = watching(kube_cluster, name)
    assert process.stdout is not None
    assert "Progressing, 2 of 3 nodes updated" in process.stdout.readline()
    set_rollout(api, name, _rollout("Complete", 3, []))
    rest, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert "waiting for you" not in rest
    assert "Complete, 3 of 3 nodes updated" in rest


def test_pause_resume_and_retry_write_what_the_coordinator_reads(
    kube_cluster: KubeCluster, namespace: str, api: Api, make_node: Any
) -> None:
    name = f"{namespace}-gpu"
    # Held after its first node, as the coordinator says it: about the Module's KMM version.
    held = {**_rollout("Held", 1, []), "targetVersion": "v2-3fa9c2d1"}
    _versioned_driver(api, namespace, name, held)
    assert gpuctl(kube_cluster.kubeconfig, "rollout", "pause", name).returncode == 0
    assert api.get_driver(name)["spec"]["rollout"]["paused"] is True  # type: ignore[index]
    assert gpuctl(kube_cluster.kubeconfig, "rollout", "resume", name).returncode == 0
    driver = api.get_driver(name)
    assert driver is not None
    assert driver["spec"]["rollout"]["paused"] is False
    # Released for the version the hold speaks of (the rollout's target, not kernelModule.version).
    assert driver["metadata"]["annotations"][names.RESUMED_VERSION] == "v2-3fa9c2d1"

    failed = make_node("failed", labels={STATE_LABEL: "Failed"}).metadata.name
    done = make_node("done", labels={STATE_LABEL: "Done"}).metadata.name
    retried = gpuctl(kube_cluster.kubeconfig, "rollout", "retry", name, "--node", failed)
    assert retried.returncode == 0, retried.stderr
    node = api.kube.request("GET", f"/api/v1/nodes/{failed}")
    assert node["metadata"]["labels"][STATE_LABEL] == "Pending"
    refused = gpuctl(kube_cluster.kubeconfig, "rollout", "retry", name, "--node", done)
    assert refused.returncode == 1
    assert "only a Failed or Blocked node can be retried" in refused.stderr
    # The GPUDriver first, as its siblings take it: a GPUDriver without --node is asked which
    # node; another GPUDriver's node is refused; the older `retry NODE` works, with a warning.
    which = gpuctl(kube_cluster.kubeconfig, "rollout", "retry", name)
    assert (which.returncode, which.stderr) == (
        1,
        f'gpuctl: which node of GPUDriver "{name}"? add --node NODE\n',
    )
    theirs = make_node(
        "theirs", labels={STATE_LABEL: "Failed", names.TARGET_LABEL: f"{name}-other"}
    ).metadata.name
    foreign = gpuctl(kube_cluster.kubeconfig, "rollout", "retry", name, "--node", theirs)
    assert foreign.returncode == 1
    assert f'in the rollout of GPUDriver "{name}-other", not "{name}"' in foreign.stderr
    older = gpuctl(kube_cluster.kubeconfig, "rollout", "retry", theirs)
    assert older.returncode == 0, older.stderr
    assert f"use `gpuctl rollout retry --node {theirs}`" in older.stderr


def test_dry_runs_write_nothing_and_the_server_one_runs_admission_and_rbac(
    kube_cluster: KubeCluster, namespace: str, api: Api, make_node: Any
) -> None:
    """--dry-run (client) sends nothing; --dry-run=server sends the write with dryRun=All: the
    API server checks it (RBAC refuses it where the write would be refused) and stores
    nothing."""
    name = f"{namespace}-gpu"
    _versioned_driver(api, namespace, name, _rollout("Progressing", 1, []))
    before = api.get_driver(name)
    assert before is not None
    for how, said in (("--dry-run", "(dry run)"), ("--dry-run=server", "(server dry run)")):
        done = gpuctl(kube_cluster.kubeconfig, "rollout", "pause", name, how)
        assert done.returncode == 0, done.stderr
        assert f"paused {said}" in done.stdout, done.stdout
    after = api.get_driver(name)
    assert after is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    failed = make_node("failed", labels={STATE_LABEL: "Failed"}).metadata.name
    retried = gpuctl(
        kube_cluster.kubeconfig, "rollout", "retry", name, "--node", failed, "--dry-run=server"
    )
    assert retried.returncode == 0, retried.stderr
    assert "back to Pending (server dry run)" in retried.stdout
    node = api.kube.request("GET", f"/api/v1/nodes/{failed}")
    assert node["metadata"]["labels"][STATE_LABEL] == "Failed"
    # A user who may read Nodes but not patch them: the server's dry run is refused by RBAC,
    # as the write would be; the client's, which sends nothing, is not.
    reader = f"{namespace}-node-reader"
    rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {"apiGroups": [names.GROUP], "resources": [names.GPUDRIVER_PLURAL], "verbs": ["get"]},
    ]
    with granted(api.kube, reader, rules, user(reader)):
        config = kube_cluster.user_kubeconfig(reader)
        retry = ("rollout", "retry", name, "--node", failed)
        refused = gpuctl(config, *retry, "--dry-run=server")
        assert refused.returncode == 1
        assert "patch" in refused.stderr, refused.stderr
        assert gpuctl(config, *retry, "--dry-run").returncode == 0


OLD_VERSION = "v1-1111aaaa"


def _plan_spec(namespace: str) -> dict[str, Any]:
    spec = simple_spec(namespace)
    spec["kernelModule"]["kernelMappings"] = [
        {"regexp": r"^6\.8\.", "containerImage": "registry.example.com/xe:2.0"}
    ]
    return spec


def _plan_driver(api: Api, namespace: str, name: str) -> str:
    """A GPUDriver for kernels 6.8.*, and the Module the coordinator would have written for it
    (selecting the nodes carrying the target label, at its version); returns KMM's version
    label for that Module."""
    spec = _plan_spec(namespace)
    api.create_driver(gpudriver(name, namespace, spec))
    module = f"{name}-gpu"
    api.kube.request(
        "POST",
        api.module_path(namespace),
        body={
            "apiVersion": "kmm.sigs.x-k8s.io/v1beta1",
            "kind": "Module",
            "metadata": {"name": module, "namespace": namespace},
            "spec": {
                "selector": {names.TARGET_LABEL: name},
                "tolerations": [{"operator": "Exists"}],
                "moduleLoader": {
                    "container": {
                        "version": kmm_version(spec),
                        "modprobe": {"moduleName": "xe"},
                        "kernelMappings": [
                            {"regexp": r"^6\.8\.", "containerImage": "registry.example.com/xe:2.0"}
                        ],
                    }
                },
            },
        },
    )
    api.kube.request(
        "PATCH",
        f"{api.driver_path(name)}/status",
        body={"status": {"module": f"modules.kmm.sigs.x-k8s.io/{namespace}/{module}"}},
        content_type="application/merge-patch+json",
    )
    # KMM's ModuleImagesConfig, as KMM leaves it once it has found the image.
    image = "registry.example.com/xe:2.0"
    api.kube.request(
        "POST",
        api.images_config_path(namespace),
        body={
            "apiVersion": "kmm.sigs.x-k8s.io/v1beta1",
            "kind": "ModuleImagesConfig",
            "metadata": {"name": module, "namespace": namespace},
            "spec": {
                "images": [{"image": image, "kernelVersion": "6.8.0-60-generic"}],
                "imagePullPolicy": "IfNotPresent",
                "pushBuiltImage": False,
            },
        },
    )
    api.kube.request(
        "PATCH",
        f"{api.images_config_path(namespace, module)}/status",
        body={"status": {"imagesStates": [{"image": image, "status": "Exists"}]}},
        content_type="application/merge-patch+json",
    )
    return names.kmm_version_label(namespace, module)


def _annotate(api: Api, node: str, annotations: dict[str, str]) -> None:
    api.kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        body={"metadata": {"annotations": annotations}},
        content_type="application/merge-patch+json",
    )


def plan_rows(stdout: str) -> dict[str, dict[str, str]]:
    """The plan's table, node -> column -> cell (cells may hold spaces)."""
    lines = stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("ORDER "))
    header = lines[first]
    columns = header.split()
    starts = [header.index(column) for column in columns]
    ends = [*starts[1:], None]
    rows = {}
    for line in lines[first + 1 :]:
        cells = {c: line[s:e].strip() for c, s, e in zip(columns, starts, ends, strict=True)}
        rows[cells["NODE"]] = cells
    return rows


def stale(node: str) -> dict[str, Any]:
    """A GPUNode the coordinator no longer counts as fresh (its agent went silent)."""
    return dict(
        connected(node),
        conditions=[
            {
                "type": "Fresh",
                "status": "False",
                "reason": "NoHeartbeat",
                "message": "no heartbeat or report from the agent for 6.1s (the freshness bound "
                "is 6s): the node's state is unknown",
                "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        ],
    )


def test_rollout_plan_shows_what_kmm_would_touch_and_whether_each_may_go(
    kube_cluster: KubeCluster, namespace: str, api: Api, make_node: Any
) -> None:
    name = f"{namespace}-gpu"
    version_label = _plan_driver(api, namespace, name)
    target_version = kmm_version(_plan_spec(namespace))
    target = {names.TARGET_LABEL: name}
    nodes = {
        key: make_node(key, labels=labels, kernel_version=kernel).metadata.name
        for key, labels, kernel in (
            ("a-first", node_labels(namespace), "6.8.0-60-generic"),
            (
                "b-reload",
                node_labels(namespace, **target, **{version_label: OLD_VERSION}),
                "6.8.0-60-generic",
            ),
            (
                "c-left",
                {**node_labels(namespace), TEST_LABEL: "elsewhere", **target},
                "6.8.0-60-generic",
            ),
            ("d-kernel", node_labels(namespace, **target), "6.11.0-1-oem"),
            (
                "e-done",
                node_labels(
                    namespace, **target, **{version_label: target_version, STATE_LABEL: "Done"}
                ),
                "6.8.0-60-generic",
            ),
            ("f-stale", node_labels(namespace), "6.8.0-60-generic"),
            (
                "z-elsewhere",
                {**node_labels(namespace), TEST_LABEL: "elsewhere"},
                "6.8.0-60-generic",
            ),
        )
    }
    _annotate(api, nodes["e-done"], {names.STATE_VERSION: target_version})
    for key in ("a-first", "c-left", "e-done"):
        put_gpunode(api, nodes[key], connected(nodes[key]))
    put_gpunode(api, nodes["b-reload"], connected(nodes["b-reload"], busy=True))
    put_gpunode(api, nodes["f-stale"], stale(nodes["f-stale"]))
    api.create_claim(namespace, "train-0", nodes["c-left"])
    # An admin's cordon: the coordinator starts that node first (it takes no new slot).
    api.kube.request(
        "PATCH",
        f"/api/v1/nodes/{nodes['f-stale']}",
        body={"spec": {"unschedulable": True}},
        content_type="application/merge-patch+json",
    )

    done = gpuctl(kube_cluster.kubeconfig, "rollout", "plan", name)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (
        f"GPUDriver {name}: target version {target_version} (Module {namespace}/{name}-gpu)."
    )
    rows = plan_rows(done.stdout)
    in_order = [
        nodes[k] for k in ("f-stale", "a-first", "b-reload", "c-left", "d-kernel", "e-done")
    ]
    assert list(rows) == in_order, "only the nodes KMM would touch, in the coordinator's order"
    as_json = json.loads(
        gpuctl(kube_cluster.kubeconfig, "rollout", "plan", name, "-o", "json").stdout
    )
    assert [n["name"] for n in as_json["nodes"]] == in_order
    assert [n["would"] for n in as_json["nodes"]] == [rows[n]["WOULD"] for n in in_order]
    assert as_json["targetVersion"] == target_version
    table = {
        key: (rows[nodes[key]]["ORDER"], rows[nodes[key]]["ACTION"], rows[nodes[key]]["WOULD"])
        for key in ("a-first", "b-reload", "c-left", "d-kernel", "e-done", "f-stale")
    }
    # e-done is Done at the target: loads are held after the first node; the removals wait
    # for a slot (the admin's cordon on f-stale takes the one maxUnavailable allows). Beside
    # each, where its own checks take it at its turn, on its agent's latest report.
    assert table == {
        "f-stale": ("1", "load", "blocked"),
        "a-first": ("2", "load", "wait"),
        "b-reload": ("3", "reload", "blocked"),
        "c-left": ("4", "unload", "blocked"),
        "d-kernel": ("5", "unload", "blocked"),
        "e-done": ("-", "none", "done"),
    }
    assert rows[nodes["a-first"]]["NEXT"] == "Pending, then wait (Held)"
    assert rows[nodes["c-left"]]["NEXT"] == "Pending, then wait (MaxUnavailable)"
    assert done.stdout.splitlines()[1].startswith(
        f"No node starts now: held after the first node of {target_version}"
    )
    change = {key: rows[nodes[key]]["CHANGE"] for key in nodes if nodes[key] in rows}
    assert change["a-first"] == "first install; KMM's loader first removes the live xe (an unload)"
    assert change["b-reload"] == f"from {OLD_VERSION} to {target_version}: unload, then load"
    assert change["c-left"] == (
        f"left the node selector: {TEST_LABEL}={namespace} (the node has {TEST_LABEL}=elsewhere)"
    )
    assert change["d-kernel"] == "no kernel mapping for its kernel 6.11.0-1-oem"
    assert change["e-done"] == f"at {target_version}"
    why = {key: rows[nodes[key]]["WHY"] for key in nodes if nodes[key] in rows}
    assert why["a-first"] == "held (AfterFirstNode); at its turn: nothing blocks"
    assert "at its turn: starts, then its check blocks it: " in why["b-reload"]
    assert "pid 4242 (ollama)" in why["b-reload"]
    assert why["c-left"].endswith(f"at its turn: allocated GPU ResourceClaim {namespace}/train-0")
    assert "no fresh agent report (no GPUNode: the agent never reported)" in why["d-kernel"]
    assert "no heartbeat or report from the agent for 6.1s" in why["f-stale"]
    assert rows[nodes["e-done"]]["NOW"] == f"Done ({target_version})"


def test_rollout_plan_blocks_every_node_when_claims_cannot_be_listed(
    kube_cluster: KubeCluster, namespace: str, api: Api, make_node: Any, tmp_path: Path
) -> None:
    """A reader who may list everything the plan reads but ResourceClaims: the claims are
    unknown, never "none", so no node may go."""
    name = f"{namespace}-gpu"
    _plan_driver(api, namespace, name)
    idle = make_node("idle", labels=node_labels(namespace)).metadata.name
    put_gpunode(api, idle, connected(idle))
    reader = f"{namespace}-plan-reader"
    read = ["get", "list"]
    rules = [
        {
            "apiGroups": [names.GROUP],
            "resources": ["gpudrivers", "gpunodes"],
            "verbs": read,
        },
        {
            "apiGroups": [names.KMM_GROUP],
            "resources": ["modules", names.KMM_IMAGES_CONFIG_PLURAL],
            "verbs": read,
        },
        {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": read},
    ]
    with granted(api.kube, reader, rules, service_account(namespace, "default")):
        token = kube_cluster.service_account_token(namespace, "default")
        kubeconfig = token_kubeconfig(kube_cluster, token, tmp_path / "kubeconfig")
        done = gpuctl(kubeconfig, "rollout", "plan", name)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1].startswith(
        "Allocated GPU ResourceClaims are unknown: you are not allowed to list "
        "resourceclaims.resource.k8s.io: "
    )
    row = plan_rows(done.stdout)[idle]
    assert (row["ACTION"], row["WOULD"]) == ("load", "blocked")
    assert row["WHY"].startswith(
        "starts, then its check blocks it: cannot tell whether GPU ResourceClaims are allocated "
        "on the node: you are not allowed to list resourceclaims.resource.k8s.io"
    )


def test_the_charts_view_role_runs_every_read_command(
    kube_cluster: KubeCluster, namespace: str, api: Api, make_node: Any
) -> None:
    """A user bound cluster-wide to Kubernetes' view (its bootstrap rules,
    system:aggregate-to-view) plus the chart's aggregated view rules, as the aggregation
    controller makes `view`, runs status, history, plan, nodes and version, and the plan knows
    everything it reads (nothing "unknown: you are not allowed")."""
    name, versioned = f"{namespace}-gpu", f"{namespace}-v"
    _plan_driver(api, namespace, name)
    _versioned_driver(api, namespace, versioned, _rollout("Progressing", 2, [BLOCKED_NODE]))
    idle = make_node("idle", labels=node_labels(namespace)).metadata.name
    put_gpunode(api, idle, connected(idle))
    viewer = f"{namespace}-viewer"
    rules = json.loads(
        json.dumps(VIEW_RULES).replace(COORDINATOR_LEASE, names.DEFAULT_COORDINATOR_LEASE)
    )
    with granted(api.kube, viewer, rules, user(viewer), also=("system:aggregate-to-view",)):
        kubeconfig = kube_cluster.user_kubeconfig(viewer)
        for command in (
            ("rollout", "status", versioned),
            ("rollout", "history", versioned),
            ("rollout", "plan", name),
            ("nodes",),
            ("version", "--namespace", namespace),
        ):
            done = gpuctl(kubeconfig, *command)
            assert done.returncode in (0, 3), (command, done.stderr)  # 3: not Complete
            assert "not allowed" not in done.stdout + done.stderr, (command, done.stdout)
        plan = gpuctl(kubeconfig, "rollout", "plan", name)
        assert plan_rows(plan.stdout)[idle]["ACTION"] == "load"
