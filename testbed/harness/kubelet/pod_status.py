"""The Pod status a kubelet writes, as plain data: container states, exit codes, restart counts,
phases, and the crash-loop back-off between restarts.

Only what KMM reads and an admin sees in ``kubectl describe pod`` is written: the phase, each
container's ``state`` (``waiting`` with the kubelet's reason, ``running``, ``terminated`` with
exit code, reason and times), ``lastState`` after a restart, ``restartCount``, ``ready``.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

PENDING = "Pending"
RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"

ERR_IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
POD_INITIALIZING = "PodInitializing"


def timestamp(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class BackOff:
    """The kubelet's restart back-off: ``initial`` seconds, doubling, at most ``cap``
    (kubelet: 10 s and 300 s; kubelet.BackOff in pkg/kubelet)."""

    initial: float = 10.0
    cap: float = 300.0

    def delay(self, restarts: int) -> float:
        """Seconds before the restart that follows ``restarts`` earlier ones (0: the first)."""
        return float(min(self.cap, self.initial * (2 ** min(restarts, 30))))


# The back-off the integration tests run KMM's Pods with: the kubelet's shape in seconds rather
# than minutes, so that a node whose loads were refused recovers in seconds once fixed (KMM
# itself restarts nothing: the worker Pod's restartPolicy does).
TEST_BACKOFF = BackOff(initial=1.0, cap=4.0)


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    return {"waiting": {"reason": reason, **({"message": message} if message else {})}}


def running(started: datetime.datetime) -> dict[str, Any]:
    return {"running": {"startedAt": timestamp(started)}}


def terminated(
    exit_code: int, started: datetime.datetime, finished: datetime.datetime, message: str = ""
) -> dict[str, Any]:
    """A terminated container; ``message``: its termination message, if it left one."""
    return {
        "terminated": {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": timestamp(started),
            "finishedAt": timestamp(finished),
            **({"message": message} if message else {}),
        }
    }


CONTAINER_CREATING = "ContainerCreating"
# A kubelet's termination message from the log: the last lines, at most this much of them.
LOG_MESSAGE_LINES = 80
LOG_MESSAGE_BYTES = 2048


def termination_message(container: dict[str, Any], exit_code: int, log: str) -> str:
    """What a kubelet writes as the message of a container that wrote no termination log:
    nothing, unless its ``terminationMessagePolicy`` is FallbackToLogsOnError and it failed
    (then its log's tail)."""
    if container.get("terminationMessagePolicy") != "FallbackToLogsOnError" or exit_code == 0:
        return ""
    tail = "\n".join(log.splitlines()[-LOG_MESSAGE_LINES:])
    return tail.encode()[-LOG_MESSAGE_BYTES:].decode(errors="replace")


def container_status(
    name: str,
    image: str,
    state: dict[str, Any],
    *,
    restarts: int = 0,
    last_state: dict[str, Any] | None = None,
) -> dict[str, Any]:
    is_running = "running" in state
    return {
        "name": name,
        "image": image,
        "imageID": f"{image}@sha256:{'0' * 64}" if "waiting" not in state else "",
        "ready": is_running,
        "started": is_running,
        "restartCount": restarts,
        "state": state,
        "lastState": last_state or {},
    }


def pod_status(
    phase: str,
    started: datetime.datetime,
    containers: list[dict[str, Any]],
    init_containers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": phase,
        "startTime": timestamp(started),
        "containerStatuses": containers,
        "hostIP": "127.0.0.1",
    }
    if init_containers is not None:
        status["initContainerStatuses"] = init_containers
    return status
