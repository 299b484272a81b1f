"""Fuzz the /proc/<pid>/cgroup reader: never an exception, and what it names is well formed."""

from __future__ import annotations

from agent.cgroup_owner import OwnerKind, owner_of

_UID = "4f8e2a1c_3b5d_4e7f_9a1b_2c3d4e5f6a7b"
SEEDS = [
    (
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        f"{_UID}.slice/cri-containerd-{'ab' * 32}.scope\n"
    ).encode(),
    f"12:memory:/kubepods/besteffort/pod{_UID.replace('_', '-')}/{'cd' * 32}\n".encode(),
    b"0::/system.slice/xpumd.service\n",
    b"",
]


def fuzz_one(data: bytes) -> None:
    owner = owner_of(data.decode(errors="replace"))
    if owner.kind is OwnerKind.POD:
        assert owner.pod_uid
        assert len(owner.container_id) in (0, 64)
    if owner.kind is OwnerKind.UNKNOWN:
        assert owner.why
    else:
        assert not owner.why
