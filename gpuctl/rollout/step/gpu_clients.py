"""Who holds a node's GPUs open, by pod, and which of them the rollout can clear (pure).

The agent names every process holding a bound function's DRM nodes open and whose it is:
a pod's container (its UID), a host process, or unknown (agent/cgroup_owner.py). Here the
pod UID becomes the pod the coordinator's Pod watch knows (gpuctl/rollout/input/pod_facts.py), and
each client is judged:

- PAUSED: a pod the GPUDriver declares pausable (rollout.pause: its DaemonSets or its
  podSelector). The node's pause (gpuctl/rollout/step/pause.py) takes it off the node; the rollout
  waits for it.
- EVICTED: any other pod that a controller other than a DaemonSet or the Node owns (or none
  does): a pod holding the GPU without asking for one (a privileged pod mounting /dev/dri)
  is a GPU pod all the same, drained with them (evictGPUPods; PDBs respected).
- BLOCKING: what the rollout cannot clear: a DaemonSet's pod not declared pausable (evicted,
  it would be recreated at once, cordon or not), a static pod, a host process, a process of
  unknown owner, a pod UID the Pod watch does not know. The node is Blocked, each named.

The words name the pod, its owner, the pid and command and the device:
"pod monitoring/xpumanager-7x2kq (DaemonSet monitoring/xpumanager), pid 4242 (xpumd),
renderD128". Unknown stays unknown: it is never cleared.

A VF handed to a VM is held through VFIO, not DRM (agent/vfio_holders.py): its holders (the
VM's QEMU, in KubeVirt a virt-launcher pod) are named the same way, one per process with the
VFs it holds as its device, in the words of the PF's ACTIVE_VFS blocker (`vm_holders_words`).
Such VFs always block (gpuctl.common.unload_rule): the words only say whose VM to stop.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.rollout.input.pod_facts import DAEMON_SET, NODE_OWNER, PodFacts
from gpuctl.rollout.input.settings import PauseSettings


class ClientFate(enum.Enum):
    PAUSED = "paused"
    EVICTED = "evicted"
    BLOCKING = "blocking"


@dataclass(frozen=True)
class GpuClient:
    """One process holding one device open, as the agent reported it."""

    pid: int
    command: str
    device: str  # the render node (renderD128), else the PCI address
    owner_kind: int  # pb.ProcessOwner.Kind; KIND_UNSPECIFIED from an agent that did not say
    pod_uid: str = ""
    why_unknown: str = ""


@dataclass(frozen=True)
class JudgedClient:
    client: GpuClient
    pod: PodFacts | None
    fate: ClientFate

    @property
    def words(self) -> str:
        return client_words(self.client, self.pod)


def report_clients(
    report: pb.NodeReport, addresses: Collection[str] | None = None
) -> tuple[GpuClient, ...]:
    """Every (process, device) the report lists, in its order; only of the functions at
    `addresses` when given."""
    found = []
    for device in report.devices:
        if addresses is not None and device.pci_address not in addresses:
            continue
        where = device.drm.render or device.drm.card or device.pci_address
        for client in device.clients:
            owner = client.owner
            found.append(
                GpuClient(
                    pid=client.pid,
                    command=client.command,
                    device=where,
                    owner_kind=owner.kind if client.HasField("owner") else 0,
                    pod_uid=owner.pod_uid,
                    why_unknown=owner.message,
                )
            )
    return tuple(found)


def report_vm_holders(report: pb.NodeReport, pf: str | None = None) -> tuple[GpuClient, ...]:
    """Every process holding a function handed to a VM (VFIO), once, with the functions it
    holds as its device ("0000:03:00.1, 0000:03:00.2"); only of PF `pf`'s VFs when given."""
    found: dict[int, tuple[pb.VfioHolder, list[str]]] = {}
    for device in report.devices:
        if pf is not None and device.physfn != pf:
            continue
        for holder in device.vfio_holders:
            found.setdefault(holder.pid, (holder, []))[1].append(device.pci_address)
    return tuple(
        GpuClient(
            pid=holder.pid,
            command=holder.command,
            device=", ".join(held),
            owner_kind=holder.owner.kind if holder.HasField("owner") else 0,
            pod_uid=holder.owner.pod_uid,
            why_unknown=holder.owner.message,
        )
        for holder, held in found.values()
    )


def pod_of(client: GpuClient, pods: Sequence[PodFacts]) -> PodFacts | None:
    """The pod the client's process runs in, where the pods know its UID."""
    if client.owner_kind != pb.ProcessOwner.POD or not client.pod_uid:
        return None
    return next((pod for pod in pods if pod.uid == client.pod_uid), None)


def vm_holders_words(report: pb.NodeReport, pf: str, pods: Sequence[PodFacts]) -> str:
    """Whose VMs hold PF `pf`'s VFs, to follow its ACTIVE_VFS blocker's words ("" for none
    known): "; its VFs are held by pod vms/virt-launcher-win11-x7k2p (VirtualMachineInstance
    vms/win11), pid 4711 (qemu-kvm), 0000:03:00.1, 0000:03:00.2"."""
    holders = report_vm_holders(report, pf)
    if not holders:
        return ""
    named = "; ".join(client_words(holder, pod_of(holder, pods)) for holder in holders)
    return f"; its VFs are held by {named}"


def is_pausable(pause: PauseSettings, pod: PodFacts) -> bool:
    """The GPUDriver declares the pod pausable: its DaemonSet is listed, or it carries the
    pause's podSelector labels."""
    if pod.daemon and f"{pod.namespace}/{pod.owner_name}" in pause.daemon_sets:
        return True
    return pod.has_labels(pause.pod_selector)


def fate_of(pause: PauseSettings, pod: PodFacts | None) -> ClientFate:
    if pod is None:
        return ClientFate.BLOCKING
    if is_pausable(pause, pod):
        return ClientFate.PAUSED
    if pod.owner_kind in (DAEMON_SET, NODE_OWNER):
        return ClientFate.BLOCKING
    return ClientFate.EVICTED


def judge_clients(
    clients: Sequence[GpuClient], pods: Sequence[PodFacts], pause: PauseSettings
) -> tuple[JudgedClient, ...]:
    by_uid = {pod.uid: pod for pod in pods if pod.uid}
    judged = []
    for client in clients:
        pod = by_uid.get(client.pod_uid) if client.owner_kind == pb.ProcessOwner.POD else None
        judged.append(JudgedClient(client, pod, fate_of(pause, pod)))
    return tuple(judged)


def _process(client: GpuClient) -> str:
    return f"pid {client.pid} ({client.command or '?'}), {client.device}"


def client_words(client: GpuClient, pod: PodFacts | None) -> str:
    """One client in words an admin acts on."""
    if pod is not None:
        owner = f" ({pod.owner_kind} {pod.namespace}/{pod.owner_name})" if pod.owner_kind else ""
        return f"pod {pod}{owner}, {_process(client)}"
    if client.owner_kind == pb.ProcessOwner.POD:
        return f"a pod with UID {client.pod_uid} not among the node's pods, {_process(client)}"
    if client.owner_kind == pb.ProcessOwner.HOST:
        return f"host process {_process(client)}"
    why = f" ({client.why_unknown})" if client.why_unknown else ""
    return f"a process of unknown owner{why}, {_process(client)}"


def clients_words(judged: Sequence[JudgedClient]) -> str:
    """What holds the node's GPUs, in words ("" for nothing)."""
    if not judged:
        return ""
    named = "; ".join(j.words for j in judged)
    return f"held open by {named}"


def pods_of(judged: Sequence[JudgedClient], fate: ClientFate) -> tuple[PodFacts, ...]:
    """The distinct pods of the clients judged `fate`, sorted."""
    found: dict[str, PodFacts] = {}
    for one in judged:
        if one.fate is fate and one.pod is not None:
            found[one.pod.uid] = one.pod
    return tuple(sorted(found.values(), key=str))
