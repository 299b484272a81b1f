"""Starts and stops etcd, kube-apiserver and kube-controller-manager on loopback.

``start_control_plane`` writes the PKI, starts the three processes in order, each in its own
process group, and returns only when each answers its health endpoint; if any step fails,
whatever was started is stopped before the error propagates. ``ControlPlane.stop`` stops them
in reverse order. The caller decides where the files go (``root``) and registers cleanup.
"""

from __future__ import annotations

import datetime
import ssl
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness import flags, health, processes
from tests.harness.binaries import Binaries
from tests.harness.layout import LOOPBACK, Layout, Ports
from tests.harness.pki import write_pki

ETCD_START_SECONDS = 60.0
APISERVER_START_SECONDS = 120.0
CONTROLLER_MANAGER_START_SECONDS = 60.0


@dataclass
class Component:
    """One running control-plane process."""

    name: str
    argv: list[str]
    process: subprocess.Popen[bytes]

    def record(self) -> dict[str, object]:
        return {"name": self.name, "pid": self.process.pid, "argv": self.argv}


@dataclass
class ControlPlane:
    """A running local control plane."""

    layout: Layout
    ports: Ports
    die_with_parent: bool
    components: list[Component] = field(default_factory=list)

    @property
    def server(self) -> str:
        return flags.apiserver_url(self.ports)

    def stop(self) -> None:
        """Stops every component, last started first. Safe to call twice."""
        while self.components:
            component = self.components.pop()
            processes.stop_child(component.process)


def _start(
    control_plane: ControlPlane,
    name: str,
    argv: list[str],
    *,
    health_url: str,
    timeout_seconds: float,
    context_factory: Callable[[], ssl.SSLContext | None],
) -> None:
    log_file = control_plane.layout.log_file(name)
    process = processes.start_in_own_group(
        argv, log_file, die_with_parent=control_plane.die_with_parent
    )
    control_plane.components.append(Component(name, argv, process))
    health.wait_healthy(
        name,
        health_url,
        process,
        log_file=log_file,
        timeout_seconds=timeout_seconds,
        context=context_factory(),
    )


def start_control_plane(
    root: Path,
    binaries: Binaries,
    ports: Ports,
    now: datetime.datetime,
    *,
    die_with_parent: bool,
) -> ControlPlane:
    """Starts a control plane keeping all its files under ``root`` (created if needed).

    ``die_with_parent``: the processes get SIGKILL when this process dies (for test runs).
    """
    layout = Layout(root)
    for folder in (layout.root, layout.logs, layout.etcd_data, layout.controller_manager_certs):
        folder.mkdir(parents=True, exist_ok=True)
    layout.etcd_data.chmod(0o700)
    control_plane = ControlPlane(layout, ports, die_with_parent)
    write_pki(layout, control_plane.server, now)
    try:
        _start(
            control_plane,
            "etcd",
            flags.etcd_args(binaries.etcd, layout, ports),
            health_url=f"{flags.etcd_url(ports.etcd_client)}/health",
            timeout_seconds=ETCD_START_SECONDS,
            context_factory=lambda: None,
        )
        _start(
            control_plane,
            "kube-apiserver",
            flags.apiserver_args(binaries.apiserver, layout, ports),
            health_url=f"{control_plane.server}/readyz",
            timeout_seconds=APISERVER_START_SECONDS,
            context_factory=lambda: health.tls_context(
                layout.ca_cert, layout.client_cert("admin"), layout.client_key("admin")
            ),
        )
        _start(
            control_plane,
            "kube-controller-manager",
            flags.controller_manager_args(binaries.controller_manager, layout, ports),
            health_url=f"https://{LOOPBACK}:{ports.controller_manager}/healthz",
            timeout_seconds=CONTROLLER_MANAGER_START_SECONDS,
            context_factory=health.insecure_loopback_context,
        )
    except BaseException:
        control_plane.stop()
        raise
    return control_plane
