"""A rig node rebooting, the way a real one does, for the rollout's reboot tests.

`reboot` is what happens between the old boot and the new kubelet's first status: the agent
stops, the kernel forgets every module and binding and every process goes, a new boot id;
then what loads at boot loads — the kernel's in-tree `xe`, bound to the GPU, when nothing
blacklists it (`in_tree_autoloads`), else nothing — and the node's modprobe.d says which. The
kubelet then posts the new boot id with its runtime not ready yet (Ready=False, as a kubelet
just started does); `kubelet_ready` is its next status, Ready, and restarts the agent (a
DaemonSet Pod starts again with the node). Nothing here acts for KMM or gpuctl: KMM's
operator reads the Node's boot id, gpuctl's coordinator too. `register_again` is the other way
a node's object goes and comes back: `kubectl delete node`, and its kubelet registering it.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping
from typing import Any

from coordinator.kube.client import MERGE_PATCH, path
from testbed.cluster_api import node_labels
from testbed.fakehost import FakeHost
from testbed.fakehost.pci import PCI_DEVICES
from testbed.fakehost.scenarios import B580, in_tree_xe
from testbed.harness.nodes import node_status
from testbed.harness.waiting import wait_until
from testbed.rollout_live.images import COMPANION_MODULES
from testbed.rollout_live.rig import HOST_BOOT_ID, RolloutRig, stop_process

BLACKLIST = "etc/modprobe.d/blacklist-xe.conf"


def _forget_the_old_boot(host: FakeHost) -> None:
    """Every module gone, every binding, every process."""
    for module in ("xe", *COMPANION_MODULES):
        host.remove(f"sys/module/{module}")
    if host.real(f"{PCI_DEVICES}/{B580}/driver").is_symlink():
        host.unbind(B580)
    host.remove("sys/bus/pci/drivers/xe")
    for entry in host.real("proc").iterdir():
        if entry.name.isdigit():
            host.remove_process(int(entry.name))


def reboot(
    rig: RolloutRig, node: str, *, in_tree_autoloads: bool, kernel: str | None = None
) -> str:
    """Reboots `node` into the same kernel, or into `kernel` (installed by the distro's
    update: its in-tree xe is that kernel's); returns its new boot id. The kubelet has posted
    it (and the kernel), not Ready yet."""
    stop_process(rig.agents.pop(node))
    host = rig.hosts[node]
    _forget_the_old_boot(host)
    if kernel is not None:
        host.boot_into(kernel)
        rig.kmm.serve(node, host.root, kernel)
    boot_id = str(uuid.uuid4())
    host.write(HOST_BOOT_ID, f"{boot_id}\n")
    if in_tree_autoloads:
        host.remove(BLACKLIST)
        in_tree_xe(host)
        host.bind(B580, "xe")
    else:
        host.write(BLACKLIST, "blacklist xe\n")
    _post_status(rig, node, host, boot_id, ready=False)
    return boot_id


def kubelet_ready(rig: RolloutRig, node: str, boot_id: str) -> None:
    """The kubelet's runtime is up: Ready, and the node's DaemonSet Pods (the agent) run."""
    _post_status(rig, node, rig.hosts[node], boot_id, ready=True)
    rig.start_agent(node)


def _post_status(rig: RolloutRig, node: str, host: FakeHost, boot_id: str, *, ready: bool) -> None:
    now = datetime.datetime.now(datetime.UTC)
    status = node_status(host.kernel_release, now, boot_id, ready=ready)
    rig.kube.request(
        "PATCH",
        path("", "v1", "nodes", name=node, subresource="status"),
        body={"status": status},
        content_type=MERGE_PATCH,
    )


def register_again(
    rig: RolloutRig, node: str, boot: str, kubelet_labels: Mapping[str, str] | None = None
) -> None:
    """`kubectl delete node`, then its kubelet registering it again under its name: the
    labels the kubelet sets (the GPUDriver's selector, and `kubelet_labels`: its
    --node-labels), none of gpuctl's or KMM's, and the same boot (the host did not reboot).
    In between, the garbage collector deletes KMM's NodeModulesConfig of the Node it owned."""
    rig.kube.request("DELETE", path("", "v1", "nodes", name=node))
    wait_until(
        f"the garbage collector deletes {node}'s NodeModulesConfig",
        lambda: rig.kmm.nmc(node) is None,
        timeout_seconds=60,
    )
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node, "labels": node_labels(rig.namespace, **(kubelet_labels or {}))},
    }
    rig.kube.request("POST", path("", "v1", "nodes"), body=body)
    now = datetime.datetime.now(datetime.UTC)
    status = node_status(rig.hosts[node].kernel_release, now, boot)
    rig.kube.request(
        "PATCH",
        path("", "v1", "nodes", name=node, subresource="status"),
        body={"status": status},
        content_type=MERGE_PATCH,
    )
