"""What the rollout's end-to-end tests share: nodes at OLD, busy and idle again, waits on status.

`start` brings nodes targeted and loaded at OLD, with real agents and the coordinator, to Done;
`wait_pending` waits for the status to list nodes waiting their turn;
`busy_with_ollama` makes a process hold a node's render node (an unload now would fail or
hurt), `idle_again` lets go; `gpu_pod` puts a pod asking for a GPU on a node; `assert_left`
checks the driver and the rollout are off a node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from coordinator.kube.client import path
from gpuctl.common import names
from testbed.fakehost import FakeHost
from testbed.fakehost.scenarios import B580
from testbed.harness.waiting import wait_until
from testbed.rollout_live.fake_nodes import gpu_node_root
from testbed.rollout_live.images import OLD
from testbed.rollout_live.rig import RolloutRig

TIMEOUTS = {"check": "20s", "drain": "20s", "prepare": "20s", "load": "20s", "verify": "20s"}
FAST: dict[str, Any] = {"holdAfterFirstNode": False, "timeouts": TIMEOUTS}
GPU_POD = "inference"


def old_root(path: Any) -> FakeHost:
    return gpu_node_root(path, OLD)


def start(
    rig: RolloutRig,
    shorts: list[str],
    rollout: dict[str, Any],
    coordinator_flags: Sequence[str] = (),
) -> list[str]:
    """Nodes at OLD with real agents, the coordinator (with `coordinator_flags` besides the
    rig's own), and the GPUDriver at OLD: all Done, and
    KMM's own record of each node at OLD (its first loader, which reloads the running xe, has
    finished: a test that makes a node busy next means a busy node KMM has settled on)."""
    nodes = [rig.add_node(short, old_root) for short in shorts]
    rig.create_driver(OLD, rollout)
    rig.start_coordinator(*coordinator_flags)
    for node in nodes:
        rig.start_agent(node)
    rig.wait_phases(dict.fromkeys(nodes, "Done"))
    rig.wait_kmm_loaded(nodes)
    rig.kernels.begin()
    return nodes


def wait_status(
    rig: RolloutRig,
    description: str,
    probe: Callable[[dict[str, Any]], bool],
    timeout: float = 60.0,
) -> dict[str, Any]:
    """status.rollout once `probe` holds (it is written in the pass after the nodes'); on a
    timeout, the nodes' states, the GPUDriver and the coordinator's log say why."""

    def check() -> dict[str, Any] | None:
        status = rig.rollout_status()
        return status if status and probe(status) else None

    try:
        return wait_until(f"the rollout status {description}", check, timeout_seconds=timeout)
    except AssertionError as err:
        nodes = {n: rig.state(n) for n in rig.hosts}
        driver = rig.driver()
        raise AssertionError(
            f"{err}\nnodes: {nodes}\nstatus: {driver.get('status')}\n"
            f"annotations: {driver['metadata'].get('annotations')}\n"
            f"log: {rig.coordinator_log()}"
        ) from None


def wait_pending(
    rig: RolloutRig, nodes: Sequence[str], version: str, *, was: str, kind: str = ""
) -> dict[str, Any]:
    """status.rollout once it targets `version` and lists each of `nodes` Pending (and
    waiting for `kind`, where given: a holds.WaitKind value), each still labelled Done at
    `was` (a node Done at an older version waits without a write,
    gpuctl/rollout/place/placement.py); returns
    it."""

    def waits(status: dict[str, Any]) -> bool:
        listed = {e.get("name"): e for e in status.get("nodes") or ()}
        return status.get("targetVersion") == version and all(
            (listed.get(n) or {}).get("phase") == names.Phase.PENDING.value
            and (not kind or (listed.get(n) or {}).get("waitKind") == kind)
            for n in nodes
        )

    status = wait_status(rig, f"lists {list(nodes)} Pending at {version}", waits)
    assert {n: rig.state(n) for n in nodes} == dict.fromkeys(nodes, f"Done {was}")
    return status


def wait_complete(rig: RolloutRig) -> dict[str, Any]:
    """status.rollout once it says Complete, which carries no hold: every rollout is held a
    moment (the Module asks for the new version a pass later), and a hold's key the status
    write did not remove would outlive it (coordinator/rollout/status_writes.py)."""
    status = wait_status(rig, "says Complete", lambda s: s.get("state") == "Complete")
    assert "holdKind" not in status, f"a hold outlived the rollout: {status}"
    return status


def module_version(rig: RolloutRig, node: str) -> str:
    text = rig.hosts[node].real("sys/module/xe/version").read_text()
    return text.split("using backports xeb_", 1)[1].split()[0]


OLLAMA_CGROUP = "0::/system.slice/ollama.service\n"


def busy_with_ollama(rig: RolloutRig, node: str) -> None:
    """ollama, a systemd service on the host (not a pod), opens the node's render node."""
    host = rig.hosts[node]
    host.add_process(4242, "ollama", cgroup=OLLAMA_CGROUP)
    host.add_drm_fd(4242, 5, "renderD128", pdev=B580, client_id=7)
    host.write("sys/module/xe/refcnt", "1\n")


def gpu_pod(rig: RolloutRig, node: str) -> str:
    """A pod bound to `node` requesting gpu.intel.com/xe (no kubelet runs it: it stays
    Pending, which is not finished, so the drain waits on it); its name."""
    rig.kube.request(
        "POST",
        path("", "v1", "pods", namespace=rig.namespace),
        body={
            "metadata": {"name": GPU_POD},
            "spec": {
                "nodeName": node,
                "containers": [
                    {
                        "name": "worker",
                        "image": "registry.example.com/inference:1",
                        "resources": {"limits": {"gpu.intel.com/xe": "1"}},
                    }
                ],
            },
        },
    )
    return GPU_POD


def idle_again(rig: RolloutRig, node: str) -> None:
    host = rig.hosts[node]
    host.remove_process(4242)
    host.write("sys/module/xe/refcnt", "0\n")


def assert_left(rig: RolloutRig, node: str) -> None:
    """The driver is off the node and the node out of the rollout."""
    obj = rig.node(node)
    labels = obj["metadata"].get("labels") or {}
    assert names.TARGET_LABEL not in labels
    assert rig.labels.version not in labels
    assert names.STATE_LABEL not in labels
    assert rig.labels.ready not in labels
    annotations = obj["metadata"].get("annotations") or {}
    assert not [k for k in annotations if k.startswith(f"{names.GROUP}/")], annotations
    assert not obj["spec"].get("unschedulable")
    assert not rig.hosts[node].real("sys/module/xe").exists()


def held_by(version: str, words: str) -> Callable[[dict[str, Any]], bool]:
    """A probe of status.rollout for wait_status: Held for `version`, its message saying
    `words`."""
    return lambda s: (
        s.get("targetVersion") == version
        and s.get("state") == "Held"
        and words in s.get("message", "")
    )
