"""One Pod as the kubelet of KMM's Pods runs it: its thread and stop signal, a worker Pod's
containers' states and restarts, and the end of a run (``PodGoneError``).

Apart from the loop (kubelet.py), which makes and kills runs, and the runners
(pod_runners.py), which drive them: both hold these, neither owns them.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.harness.kubelet import pod_status as status
from testbed.harness.kubelet.volumes import write_volumes


@dataclass
class PodRun:
    """One Pod the kubelet runs: its thread, the container now running, a stop signal."""

    uid: str
    thread: threading.Thread | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    process: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def kill(self) -> None:
        self.stop.set()
        with self.lock:
            if self.process is not None and self.process.poll() is None:
                # Its thread may reap it between the poll and the kill: then it is gone.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, 9)


@dataclass
class WorkerPod:
    """A worker Pod as its kubelet tracks it: its containers' states and restarts."""

    pod: dict[str, Any]
    folder: Path
    started: datetime.datetime
    init_state: dict[str, Any] = field(default_factory=lambda: status.waiting("ContainerCreating"))
    init_last: dict[str, Any] | None = None
    init_restarts: int = 0
    main_state: dict[str, Any] = field(
        default_factory=lambda: status.waiting(status.POD_INITIALIZING)
    )
    main_last: dict[str, Any] | None = None
    main_restarts: int = 0
    volumes: dict[str, tuple[str, Path]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.volumes = write_volumes(self.pod, self.folder)

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])

    @property
    def node(self) -> str:
        return str(self.pod["spec"]["nodeName"])

    @property
    def init(self) -> dict[str, Any]:
        return dict(self.pod["spec"]["initContainers"][0])

    @property
    def main(self) -> dict[str, Any]:
        return dict(self.pod["spec"]["containers"][0])

    def status(self, phase: str) -> dict[str, Any]:
        main = status.container_status(
            self.main["name"],
            self.main["image"],
            self.main_state,
            restarts=self.main_restarts,
            last_state=self.main_last,
        )
        init = status.container_status(
            self.init["name"],
            self.init["image"],
            self.init_state,
            restarts=self.init_restarts,
            last_state=self.init_last,
        )
        return status.pod_status(phase, self.started, [main], [init])


class PodGoneError(Exception):
    """The Pod was deleted (404 on a status write), or the kubelet is stopping."""
