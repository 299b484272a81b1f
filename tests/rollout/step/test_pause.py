"""A real GPU node is never idle: each GPU client named by its pod, the node's own GPU daemons
paused for its step (gpuctl/rollout/step/pause.py, gpuctl/rollout/step/gpu_clients.py), and the
driver-ready label off
from the step's first write until the new driver is verified."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import timedelta

import pytest

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import EvictPods, PatchNode
from gpuctl.rollout.decide import decide
from gpuctl.rollout.input.facts import GpuPod, NodeFacts, ReportFacts
from gpuctl.rollout.input.pod_facts import PodFacts
from gpuctl.rollout.input.records import RecordError
from gpuctl.rollout.input.settings import PauseSettings, RolloutSettings
from gpuctl.rollout.step.checking import step_checking
from gpuctl.rollout.step.draining import step_draining
from gpuctl.rollout.step.gpu_clients import ClientFate, GpuClient, client_words, judge_clients
from gpuctl.rollout.step.loading import step_loading
from gpuctl.rollout.step.pause import PausedRecord, decode_paused, encode_paused
from gpuctl.rollout.step.preparing import step_preparing
from gpuctl.rollout.step.verifying import step_verifying
from tests.support.rollout_samples import (
    ACTIVE_VFS,
    KMM,
    NOW,
    OPEN_CLIENT,
    PF,
    answered,
    loaded_labels,
    new_report,
    node,
    report,
    rollout,
    targeted,
)

XPUM = PodFacts(
    "monitoring",
    "xpumanager-7x2kq",
    "uid-xpum",
    owner_kind="DaemonSet",
    owner_name="xpumanager",
    labels=(("app", "xpumanager"),),
    ready=True,
)
EXPORTER = PodFacts(
    "monitoring", "exporter-abcde", "uid-exp", owner_kind="DaemonSet", owner_name="exporter"
)
PRIVILEGED = PodFacts("ml", "debug-shell", "uid-priv", owner_kind="", owner_name="")
STATIC = PodFacts("kube-system", "gpu-probe-n1", "uid-static", owner_kind="Node", owner_name="n1")
PAUSE = PauseSettings(daemon_sets=frozenset({"monitoring/xpumanager"}))
HOST = pb.ProcessOwner.HOST
POD = pb.ProcessOwner.POD


def settings(**kwargs: object) -> RolloutSettings:
    base = RolloutSettings(hold_after_first_node=False, pause=PAUSE)
    return dataclasses.replace(base, **kwargs)  # type: ignore[arg-type]


def held_by(*clients: tuple[int, str, int, str]) -> ReportFacts:
    """A report whose PF is held open by `clients` (pid, command, owner kind, pod UID)."""
    facts = report(blockers=[OPEN_CLIENT])
    proto = facts.report
    device = proto.devices.add(pci_address=PF, driver="xe")
    device.drm.render = "renderD128"
    for pid, command, kind, uid in clients:
        owner = pb.ProcessOwner(kind=kind, pod_uid=uid)  # type: ignore[arg-type]
        device.clients.add(pid=pid, command=command, owner=owner)
    return facts


XPUMD = (4242, "xpumd", POD, "uid-xpum")
XORG = (77, "Xorg", HOST, "")


def checking(*pods: PodFacts, labels: dict[str, str] | None = None) -> NodeFacts:
    facts = node(
        phase=Phase.CHECKING,
        labels={**loaded_labels(), names.DRIVER_READY_LABEL: "true", **(labels or {})},
    )
    return dataclasses.replace(facts, pods=pods)


def only_write(actions: Sequence[object]) -> PatchNode:
    [write] = [a for a in actions if isinstance(a, PatchNode)]
    return write


# -- naming -------------------------------------------------------------------------------


def test_every_client_is_named_by_its_pod_its_owner_or_what_is_not_known() -> None:
    pods = [XPUM, PRIVILEGED]
    clients = [
        GpuClient(4242, "xpumd", "renderD128", POD, "uid-xpum"),
        GpuClient(77, "Xorg", "renderD128", HOST),
        GpuClient(5, "", "card0", pb.ProcessOwner.UNKNOWN, why_unknown="cannot read cgroup"),
        GpuClient(9, "ghost", "renderD128", POD, "uid-gone"),
    ]
    words = [j.words for j in judge_clients(clients, pods, PAUSE)]
    assert words == [
        "pod monitoring/xpumanager-7x2kq (DaemonSet monitoring/xpumanager), "
        "pid 4242 (xpumd), renderD128",
        "host process pid 77 (Xorg), renderD128",
        "a process of unknown owner (cannot read cgroup), pid 5 (?), card0",
        "a pod with UID uid-gone not among the node's pods, pid 9 (ghost), renderD128",
    ]
    assert client_words(GpuClient(1, "x", "renderD129", 0), None).startswith("a process of")


def test_each_client_is_paused_evicted_or_blocking() -> None:
    fates = {
        pod.name: judge_clients([GpuClient(1, "c", "r", POD, pod.uid)], [pod], PAUSE)[0].fate
        for pod in (XPUM, EXPORTER, PRIVILEGED, STATIC)
    }
    assert fates == {
        "xpumanager-7x2kq": ClientFate.PAUSED,
        "exporter-abcde": ClientFate.BLOCKING,  # a DaemonSet's pod not declared: comes back
        "debug-shell": ClientFate.EVICTED,  # a pod holding the GPU is a GPU pod
        "gpu-probe-n1": ClientFate.BLOCKING,  # a static pod: nothing can take it off
    }
    by_label = PauseSettings(pod_selector={"app": "xpumanager"})
    [judged] = judge_clients([GpuClient(1, "c", "r", POD, "uid-xpum")], [XPUM], by_label)
    assert judged.fate is ClientFate.PAUSED
    # A host process claiming a pod's UID is still a host process.
    [host] = judge_clients([GpuClient(1, "c", "r", HOST, "uid-xpum")], [XPUM], PAUSE)
    assert host.fate is ClientFate.BLOCKING
    assert host.pod is None


# -- Checking: what blocks, named ---------------------------------------------------------


def test_a_client_nothing_can_clear_blocks_the_check_named_and_the_label_stays() -> None:
    facts = checking(XPUM, EXPORTER)
    busy = held_by(XPUMD, (99, "exporter", POD, "uid-exp"), (77, "Xorg", HOST, ""))
    write = only_write(
        step_checking(rollout([facts], settings=settings()), answered(facts, report=busy)).actions
    )
    assert write.phase_to is Phase.BLOCKED
    reason = str(write.annotations[names.REASON])
    assert "pod monitoring/exporter-abcde (DaemonSet monitoring/exporter), pid 99" in reason
    assert "host process pid 77 (Xorg), renderD128" in reason
    assert "xpumanager" not in reason  # paused, not a blocker
    assert write.annotations[names.REASON_KIND] == "open-clients"
    assert names.DRIVER_READY_LABEL not in write.labels


def test_a_node_held_only_by_pausable_daemons_is_cordoned_and_paused_in_one_write() -> None:
    facts = checking(XPUM)
    inp = rollout([facts], settings=settings())
    write = only_write(step_checking(inp, answered(facts, report=held_by(XPUMD))).actions)
    assert write.phase_to is Phase.DRAINING
    assert write.unschedulable is True
    assert write.labels[names.DRIVER_READY_LABEL] is None
    record = decode_paused(str(write.annotations[names.PAUSED_CLIENTS]))
    assert record == PausedRecord(True, ("DaemonSet monitoring/xpumanager",), ())
    assert "monitoring/xpumanager-7x2kq (DaemonSet monitoring/xpumanager)" in str(
        write.annotations[names.REASON]
    )


def test_a_privileged_pod_holding_the_gpu_is_drained_like_a_gpu_pod() -> None:
    facts = checking(PRIVILEGED)
    busy = held_by((5, "bash", POD, "uid-priv"))
    inp = rollout([facts], settings=settings(evict_gpu_pods=True))
    write = only_write(step_checking(inp, answered(facts, report=busy)).actions)
    assert write.phase_to is Phase.DRAINING
    record = decode_paused(str(write.annotations[names.PAUSED_CLIENTS]))
    assert record is not None
    assert record.evict == ("ml/debug-shell",)
    # Without evictGPUPods nothing would end it but itself: it blocks, named.
    off = rollout([facts], settings=settings())
    blocked = only_write(step_checking(off, answered(facts, report=busy)).actions)
    assert blocked.phase_to is Phase.BLOCKED
    assert "pod ml/debug-shell, pid 5 (bash)" in str(blocked.annotations[names.REASON])


# -- Draining: paused pods leave, drained pods are evicted --------------------------------


def draining(*pods: PodFacts, record: PausedRecord, since: float = 5) -> NodeFacts:
    facts = node(
        phase=Phase.DRAINING,
        since=since,
        labels=loaded_labels(),
        annotations={
            names.PAUSED_CLIENTS: encode_paused(record),
            names.CORDONED_BY_GPUCTL: "true",
        },
        unschedulable=True,
    )
    return dataclasses.replace(facts, pods=pods)


PAUSED = PausedRecord(True, ("DaemonSet monitoring/xpumanager",), ())


def test_the_drain_waits_for_paused_pods_to_leave_and_never_evicts_them() -> None:
    facts = draining(XPUM, record=PAUSED)
    step = step_draining(rollout([facts], settings=settings(evict_gpu_pods=True)), facts)
    assert step.actions == []
    assert step.wake_in is not None
    assert step.wake_in <= 2.0
    gone = draining(record=PAUSED)
    write = only_write(step_draining(rollout([gone], settings=settings()), gone).actions)
    assert write.phase_to is Phase.PREPARING


def test_paused_pods_that_never_leave_block_the_node_saying_why() -> None:
    """Their spec selects on the label, yet the DaemonSet controller did not delete them
    (it is down, say): Blocked `paused-pods`, and tried again. One whose DaemonSet does not
    select on the label is test_pause_not_selecting.py's."""
    selecting = dataclasses.replace(XPUM, selects_driver_ready=True)
    facts = draining(selecting, record=PAUSED, since=700)
    write = only_write(step_draining(rollout([facts], settings=settings()), facts).actions)
    assert write.phase_to is Phase.BLOCKED
    assert write.annotations[names.REASON_KIND] == "paused-pods"
    reason = str(write.annotations[names.REASON])
    assert "monitoring/xpumanager-7x2kq (DaemonSet monitoring/xpumanager)" in reason
    assert f"selects on {names.DRIVER_READY_LABEL}=true" in reason
    assert names.PAUSE_NOT_SELECTING not in write.annotations
    # Nothing was changed on the node: it is released, and its label given back.
    assert write.labels[names.DRIVER_READY_LABEL] == "true"
    assert write.unschedulable is False


def test_a_drain_timeout_of_zero_waits_as_long_as_it_takes() -> None:
    timeouts = dataclasses.replace(RolloutSettings().timeouts, drain=0.0)
    facts = draining(XPUM, record=PAUSED, since=86400)
    step = step_draining(rollout([facts], settings=settings(timeouts=timeouts)), facts)
    assert step.actions == []
    assert step.wake_in is not None


def test_recorded_and_selected_pods_are_evicted_with_the_gpu_pods() -> None:
    other = PodFacts("batch", "encoder", "uid-enc", labels=(("drain", "yes"),))
    record = PausedRecord(False, (), ("ml/debug-shell",))
    facts = dataclasses.replace(
        draining(PRIVILEGED, other, XPUM, record=record), gpu_pods=(GpuPod("ml", "train"),)
    )
    inp = rollout(
        [facts], settings=settings(evict_gpu_pods=True, drain_pod_selector={"drain": "yes"})
    )
    [evict] = [a for a in step_draining(inp, facts).actions if isinstance(a, EvictPods)]
    assert [str(p) for p in evict.pods] == ["batch/encoder", "ml/debug-shell", "ml/train"]


# -- before the KMM write every client blocks ---------------------------------------------


def test_a_paused_daemon_still_holding_the_gpu_before_the_kmm_write_blocks_it() -> None:
    facts = dataclasses.replace(
        node(
            phase=Phase.PREPARING,
            labels=loaded_labels(),
            annotations={names.PAUSED_CLIENTS: encode_paused(PAUSED)},
        ),
        pods=(),
    )
    # Its pod left the node's list, yet a process of it still holds the GPU: it blocks.
    busy = held_by(XPUMD)
    write = only_write(
        step_preparing(rollout([facts], settings=settings()), answered(facts, report=busy)).actions
    )
    assert write.phase_to is Phase.BLOCKED
    assert "a pod with UID uid-xpum" in str(write.annotations[names.REASON])


# -- after the load: the label back, the daemons waited for -------------------------------


def verified(*pods: PodFacts, resumed_ago: float | None = None) -> NodeFacts:
    annotations = {names.PAUSED_CLIENTS: encode_paused(PAUSED), names.CORDONED_BY_GPUCTL: "true"}
    if resumed_ago is not None:
        annotations[names.CLIENTS_RESUMED_AT] = (NOW - timedelta(seconds=resumed_ago)).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
    facts = node(
        phase=Phase.VERIFYING, labels=loaded_labels(), annotations=annotations, unschedulable=True
    )
    return answered(dataclasses.replace(facts, pods=pods), report=new_report())


def test_a_verified_node_gets_its_label_back_and_waits_cordoned_for_its_daemons() -> None:
    facts = verified()
    write = only_write(step_verifying(rollout([facts], settings=settings()), facts).actions)
    assert write.phase_to is None
    assert write.labels == {names.DRIVER_READY_LABEL: "true"}
    assert names.CLIENTS_RESUMED_AT in write.annotations
    assert write.unschedulable is None
    waiting = verified(dataclasses.replace(XPUM, ready=False), resumed_ago=10)
    step = step_verifying(rollout([waiting], settings=settings()), waiting)
    assert step.actions == []
    assert step.wake_in is not None


def test_once_the_daemons_are_back_and_ready_the_node_is_done_and_uncordoned() -> None:
    facts = verified(XPUM, resumed_ago=10)
    write = only_write(step_verifying(rollout([facts], settings=settings()), facts).actions)
    assert write.phase_to is Phase.DONE
    assert write.labels[names.DRIVER_READY_LABEL] == "true"
    assert write.unschedulable is False
    assert write.annotations[names.PAUSED_CLIENTS] is None
    assert "paused pods back: DaemonSet monitoring/xpumanager" in str(
        write.annotations[names.REASON]
    )


def test_a_daemon_that_does_not_come_back_warns_it_does_not_fail_the_node() -> None:
    facts = verified(resumed_ago=301)
    write = only_write(step_verifying(rollout([facts], settings=settings()), facts).actions)
    assert write.phase_to is Phase.DONE
    assert write.event is not None
    assert write.event.kind == "Warning"
    assert (
        "WARNING: paused pods not back and Ready after 5m: DaemonSet monitoring/xpumanager"
        in str(write.annotations[names.REASON])
    )


def test_a_failed_node_loses_the_label() -> None:
    facts = node(
        phase=Phase.LOADING,
        since=700,
        labels={**targeted(), KMM.ready: "", names.DRIVER_READY_LABEL: "true"},
    )
    write = only_write(step_loading(rollout([facts], settings=settings()), facts).actions)
    assert write.phase_to is Phase.FAILED
    assert write.labels[names.DRIVER_READY_LABEL] is None


def test_a_record_that_cannot_be_read_is_refused_with_its_name() -> None:
    for garbage in ("{not json", '{"owners": []}', '{"readyBefore": true, "owners": [1]}'):
        with pytest.raises(RecordError, match=names.PAUSED_CLIENTS):
            decode_paused(garbage)
    assert decode_paused("") is None


def test_a_blocked_nodes_running_daemons_are_not_what_it_waits_for() -> None:
    """A node Blocked by a host process runs its GPU daemons as ever (nothing paused them):
    the status names the host process, never the daemons as something to leave."""
    facts = node(
        phase=Phase.BLOCKED,
        reason="held open by host process pid 77 (Xorg), renderD128",
        labels={**loaded_labels(), names.DRIVER_READY_LABEL: "true"},
        annotations={names.REASON_KIND: "open-clients"},
    )
    facts = answered(dataclasses.replace(facts, pods=(XPUM,)), report=held_by(XPUMD, XORG))
    decision = decide(rollout([facts], settings=settings()))
    assert not [a for a in decision.actions if isinstance(a, PatchNode)]  # no new reason
    assert decision.status is not None
    [listed] = decision.status["nodes"]
    assert "host process pid 77 (Xorg)" in listed["reason"]
    assert "paused pods to leave" not in listed["reason"]


# -- VMs ----------------------------------------------------------------------------------

VIRT_LAUNCHER = PodFacts(
    "vms",
    "virt-launcher-win11-x7k2p",
    "uid-vm",
    owner_kind="VirtualMachineInstance",
    owner_name="win11",
)


def test_a_vf_handed_to_a_vm_blocks_naming_the_vms_pod() -> None:
    facts = checking(VIRT_LAUNCHER)
    vms = report(blockers=[ACTIVE_VFS], vf_driver="vfio-pci")
    for device in vms.report.devices:
        if device.physfn == PF:
            owner = pb.ProcessOwner(kind=POD, pod_uid="uid-vm")
            device.vfio_holders.add(pid=4711, command="qemu-kvm", owner=owner)
    write = only_write(
        step_checking(rollout([facts], settings=settings()), answered(facts, report=vms)).actions
    )
    assert write.phase_to is Phase.BLOCKED
    assert str(write.annotations[names.REASON]).endswith(
        "0000:03:00.0 has 2 VFs enabled; its VFs are held by pod vms/virt-launcher-win11-x7k2p "
        "(VirtualMachineInstance vms/win11), pid 4711 (qemu-kvm), 0000:03:00.1, 0000:03:00.2"
    )
    assert write.annotations[names.REASON_KIND] == "vfs"
