"""Which pod a process runs in, from its /proc/<pid>/cgroup (pure).

A GPU client is named by its pod, not only its pid: the kubelet puts every container in a
cgroup whose path names the pod's UID and the container's ID, in one of these shapes:

- systemd cgroup driver: `.../kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<UID,
  dashes as underscores>.slice/<runtime>-<container id>.scope`, the runtime prefix
  `cri-containerd`, `crio` or `docker` (guaranteed pods have no `<qos>` level; CRI-O's
  `crio-conmon-<id>.scope` is the pod's monitor, no container of it);
- cgroupfs driver: `/kubepods/<qos>/pod<UID>/<container id>` (guaranteed: no `<qos>`), CRI-O
  naming it `crio-<container id>` (cri-o's cgmgr/cgroupfs.go `ContainerCgroupPath`);
- cgroup v2 is one line `0::<path>`; v1 one line per hierarchy `<n>:<controllers>:<path>`,
  the unified line preferred when both are there and it names a pod. On a hybrid host a
  runtime with the cgroupfs driver moves its containers into the v1 hierarchies only, their
  unified line left at the runtime's own service: then the v1 lines say. A path seen from
  inside a cgroup namespace may start with `/../..`: the pod's own segments are searched for,
  wherever.

A path with no pod segment is a host process (system.slice, user.slice, `/`). Text that is
not a cgroup file, or empty, is unknown: never taken for a host process, nor a pod.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

# A pod UID: a UUID, or (a static pod's) 32 hex digits.
_UID = r"[0-9a-f]{8}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{12}"
_SYSTEMD_POD = re.compile(rf"^kubepods(?:-besteffort|-burstable)?-pod({_UID})\.slice$")
_CGROUPFS_POD = re.compile(rf"^pod({_UID})$")
_CONTAINER_ID = r"[0-9a-f]{64}"
_SYSTEMD_CONTAINER = re.compile(rf"^(?:cri-containerd|crio|docker)-({_CONTAINER_ID})\.scope$")
_CGROUPFS_CONTAINER = re.compile(rf"^(?:crio-)?({_CONTAINER_ID})$")
_LINE = re.compile(r"^(\d+):([^:]*):(/.*)$")


class OwnerKind(enum.Enum):
    POD = "POD"
    HOST = "HOST"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class ProcessOwner:
    kind: OwnerKind
    # The pod's UID (with dashes) and the container's ID, for a pod's process ("" when its
    # cgroup names no container: CRI-O's conmon, the pod's sandbox).
    pod_uid: str = ""
    container_id: str = ""
    # Why the owner is unknown ("" otherwise).
    why: str = ""


def _canonical_uid(raw: str) -> str:
    hex_digits = raw.replace("_", "").replace("-", "")
    if len(hex_digits) != 32:
        return raw
    if "-" not in raw and "_" not in raw:
        return hex_digits  # a static pod's hash, as the API shows it
    parts = (
        hex_digits[:8],
        hex_digits[8:12],
        hex_digits[12:16],
        hex_digits[16:20],
        hex_digits[20:],
    )
    return "-".join(parts)


def _in_path(path: str) -> ProcessOwner | None:
    """The pod a cgroup path names (None: none)."""
    segments = [s for s in path.split("/") if s and s != ".."]
    for index, segment in enumerate(segments):
        match = _SYSTEMD_POD.match(segment) or _CGROUPFS_POD.match(segment)
        if match is None:
            continue
        if match.re is _CGROUPFS_POD and not any(s.startswith("kubepods") for s in segments):
            continue  # a "pod..." folder of something other than the kubelet
        after = segments[index + 1] if index + 1 < len(segments) else ""
        container = _SYSTEMD_CONTAINER.match(after) or _CGROUPFS_CONTAINER.match(after)
        container_id = container.group(1) if container else ""
        return ProcessOwner(OwnerKind.POD, _canonical_uid(match.group(1)), container_id)
    return None


def owner_of(text: str) -> ProcessOwner:
    """The owner of the process whose /proc/<pid>/cgroup holds `text`."""
    unified: list[str] = []
    legacy: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _LINE.match(line.strip())
        if match is None:
            return ProcessOwner(OwnerKind.UNKNOWN, why=f"not a cgroup line: {line[:80]!r}")
        (unified if match.group(1) == "0" and not match.group(2) else legacy).append(match.group(3))
    paths = unified + legacy
    if not paths:
        return ProcessOwner(OwnerKind.UNKNOWN, why="no cgroup lines")
    for path in paths:
        owner = _in_path(path)
        if owner is not None:
            return owner
    return ProcessOwner(OwnerKind.HOST)
