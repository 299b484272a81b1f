"""The pod a process runs in, from /proc/<pid>/cgroup (agent/cgroup_owner.py): every shape the
kubelet's cgroup drivers and the container runtimes make, host processes, and garbage."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cgroup_owner import OwnerKind, ProcessOwner, owner_of
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from testbed.fakehost import FakeHost
from testbed.fakehost.scenarios import B580, arc_b580_in_tree

UID = "4f8e2a1c-3b5d-4e7f-9a1b-2c3d4e5f6a7b"
SYSTEMD_UID = UID.replace("-", "_")
CID = "0123456789abcdef" * 4
POD = ProcessOwner(OwnerKind.POD, UID, CID)

SYSTEMD = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/{scope}"


@pytest.mark.parametrize(
    "text",
    [
        # cgroup v2, systemd driver: containerd, CRI-O, dockershim's docker
        "0::" + SYSTEMD.format(uid=SYSTEMD_UID, scope=f"cri-containerd-{CID}.scope") + "\n",
        "0::" + SYSTEMD.format(uid=SYSTEMD_UID, scope=f"crio-{CID}.scope") + "\n",
        "0::" + SYSTEMD.format(uid=SYSTEMD_UID, scope=f"docker-{CID}.scope") + "\n",
        # besteffort and guaranteed QoS
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SYSTEMD_UID}"
        f".slice/cri-containerd-{CID}.scope\n",
        f"0::/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope\n",
        # cgroupfs driver, v2 and v1
        f"0::/kubepods/burstable/pod{UID}/{CID}\n",
        f"0::/kubepods/pod{UID}/{CID}\n",
        f"12:memory:/kubepods/besteffort/pod{UID}/{CID}\n11:cpu,cpuacct:/kubepods/besteffort/"
        f"pod{UID}/{CID}\n1:name=systemd:/kubepods/besteffort/pod{UID}/{CID}\n",
        # v1 with systemd, and a hybrid host (the unified line wins)
        "4:pids:" + SYSTEMD.format(uid=SYSTEMD_UID, scope=f"docker-{CID}.scope") + "\n",
        "1:name=systemd:/\n0::"
        + SYSTEMD.format(uid=SYSTEMD_UID, scope=f"cri-containerd-{CID}.scope")
        + "\n",
        # seen from inside a cgroup namespace; a nested kind-style node
        f"0::/../../kubepods-besteffort-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope\n",
        "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope\n",
        # a process in a container running systemd or with nested cgroups
        "0::" + SYSTEMD.format(uid=SYSTEMD_UID, scope=f"cri-containerd-{CID}.scope") + "/init\n",
    ],
)
def test_every_kubelet_shape_names_the_pod_and_container(text: str) -> None:
    owner = owner_of(text)
    assert owner == POD


def test_a_pods_process_outside_a_container_names_the_pod_only() -> None:
    conmon = "0::" + SYSTEMD.format(uid=SYSTEMD_UID, scope=f"crio-conmon-{CID}.scope")
    assert owner_of(conmon) == ProcessOwner(OwnerKind.POD, UID, "")
    sandbox = f"0::/kubepods/burstable/pod{UID}\n"
    assert owner_of(sandbox) == ProcessOwner(OwnerKind.POD, UID, "")


def test_a_static_pods_hash_uid_is_kept_as_the_api_shows_it() -> None:
    static = "0123456789abcdef0123456789abcdef"
    assert owner_of(f"0::/kubepods/burstable/pod{static}/{CID}").pod_uid == static


@pytest.mark.parametrize(
    "text",
    [
        "0::/system.slice/xpumd.service\n",
        "0::/user.slice/user-1000.slice/session-3.scope\n",
        "0::/\n",
        "0::/init.scope\n",
        "12:memory:/system.slice/containerd.service\n1:name=systemd:/system.slice/x.service\n",
        f"0::/system.slice/docker-{CID}.scope\n",  # a container no kubelet runs
        "0::/podman/pod1234/ctr\n",  # "pod..." outside kubepods is not a kubelet pod
    ],
)
def test_a_path_without_a_pod_is_a_host_process(text: str) -> None:
    assert owner_of(text) == ProcessOwner(OwnerKind.HOST)


@pytest.mark.parametrize(
    "text",
    ["", "\n\n", "garbage", "0:/kubepods\n", "::\n", "\x00\x01\x02", "12:memory\n"],
)
def test_garbage_is_unknown_never_a_host_process(text: str) -> None:
    owner = owner_of(text)
    assert owner.kind is OwnerKind.UNKNOWN
    assert owner.why


# -- in the report ---------------------------------------------------------------------------


def _client(host: FakeHost) -> pb.DrmClient:
    host.write("sys/module/xe/refcnt", "1\n")  # the open file holds the module
    [device] = [d for d in host.inspect().devices if d.pci_address == B580]
    [client] = device.clients
    return client


def test_a_pods_client_is_reported_with_its_pod_and_container(tmp_path: Path) -> None:
    host = arc_b580_in_tree(tmp_path)
    cgroup = "0::" + SYSTEMD.format(uid=SYSTEMD_UID, scope=f"cri-containerd-{CID}.scope") + "\n"
    host.add_process(4242, "xpumd", cgroup=cgroup)
    host.add_drm_fd(4242, 5, "renderD128", pdev=B580, client_id=7)
    owner = _client(host).owner
    assert owner == pb.ProcessOwner(kind=pb.ProcessOwner.POD, pod_uid=UID, container_id=CID)


def test_a_host_process_is_one_and_an_unreadable_cgroup_is_unknown(tmp_path: Path) -> None:
    host = arc_b580_in_tree(tmp_path / "host")
    host.add_process(4242, "xpumd", cgroup="0::/system.slice/xpumd.service\n")
    host.add_drm_fd(4242, 5, "renderD128", pdev=B580, client_id=7)
    assert _client(host).owner.kind == pb.ProcessOwner.HOST

    missing = arc_b580_in_tree(tmp_path / "missing")
    missing.add_process(4242, "xpumd")  # no cgroup file
    missing.add_drm_fd(4242, 5, "renderD128", pdev=B580, client_id=7)
    owner = _client(missing).owner
    assert owner.kind == pb.ProcessOwner.UNKNOWN
    assert owner.message.startswith("/proc/4242/cgroup: ")

    denied = arc_b580_in_tree(tmp_path / "denied")
    denied.add_process(4242, "xpumd", cgroup="0::/system.slice/xpumd.service\n")
    denied.add_drm_fd(4242, 5, "renderD128", pdev=B580, client_id=7)
    denied.deny("proc/4242/cgroup")
    owner = _client(denied).owner
    assert owner.kind == pb.ProcessOwner.UNKNOWN
    assert "/proc/4242/cgroup" in owner.message


def test_a_hybrid_host_whose_runtime_never_joined_the_unified_tree_names_the_pod() -> None:
    # kernel/cgroup/cgroup.c proc_cgroup_show: "<hierarchy id>:<controllers>:<path>\n" per
    # v1 hierarchy (named ones as "name=systemd"), then "0::<path>\n" for the unified one.
    # On a hybrid host runc's cgroupfs (v1) manager moves the container into the v1
    # hierarchies only: the unified line keeps the runtime's own service.
    pod = f"/kubepods/besteffort/pod{UID}/{CID}"
    text = (
        f"12:cpuset:{pod}\n11:memory:{pod}\n10:devices:{pod}\n9:freezer:{pod}\n"
        f"8:net_cls,net_prio:{pod}\n7:blkio:{pod}\n6:perf_event:{pod}\n5:hugetlb:{pod}\n"
        f"4:pids:{pod}\n3:cpu,cpuacct:{pod}\n2:rdma:/\n1:name=systemd:{pod}\n"
        "0::/system.slice/containerd.service\n"
    )
    assert owner_of(text) == POD


def test_cri_o_with_the_cgroupfs_driver_names_its_containers_crio_id() -> None:
    # cri-o internal/config/cgmgr/cgroupfs.go ContainerCgroupPath:
    # filepath.Join("/", parent, crioPrefix+"-"+containerID), crioPrefix "crio".
    assert owner_of(f"0::/kubepods/burstable/pod{UID}/crio-{CID}\n") == POD
    assert owner_of(f"11:memory:/kubepods/pod{UID}/crio-{CID}\n") == POD
