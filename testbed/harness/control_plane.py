"""Starts and stops etcd, kube-apiserver and kube-controller-manager on loopback.

``start_control_plane`` writes the PKI, starts the three processes in order, each in its own
process group, and returns only when each answers its health endpoint; if any step fails,
whatever was started is stopped before the error propagates. ``ControlPlane.stop`` stops them
in reverse order; ``ControlPlane.restart_apiserver`` stops kube-apiserver and starts it again,
optionally with other flags (a control plane reconfigured under a running coordinator);
``pause``/``resume`` (SIGSTOP/SIGCONT) and ``restart`` act on any one of them, for the chaos
tests. The caller decides where the files go (``root``) and registers cleanup.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import signal
import ssl
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from testbed.harness import flags, health, processes
from testbed.harness.binaries import Binaries
from testbed.harness.health import wait_healthy
from testbed.harness.layout import LOOPBACK, Layout, Ports
from testbed.harness.pki import write_pki

ETCD_START_SECONDS = 60.0
APISERVER_START_SECONDS = 120.0
CONTROLLER_MANAGER_START_SECONDS = 60.0


@dataclass
class Component:
    """One running control-plane process, and how to tell it is up (for restarts)."""

    name: str
    argv: list[str]
    process: subprocess.Popen[bytes]
    # The command line it was first started with (a restart may add flags to it).
    first_argv: list[str] = field(default_factory=list)
    health_url: str = ""
    timeout_seconds: float = 60.0
    context_factory: Callable[[], ssl.SSLContext | None] = lambda: None

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

    def restart_apiserver(self, *extra_args: str, health: str = "readyz") -> None:
        """Stops kube-apiserver and starts it again with its first flags plus `extra_args`
        (e.g. ``--runtime-config=...``); returns once its `health` endpoint answers ok
        ("livez" for a configuration it never reports ready with)."""
        index = next(i for i, c in enumerate(self.components) if c.name == "kube-apiserver")
        first = self.components[index]
        processes.stop_child(first.process)
        argv = [*first.first_argv, *extra_args]
        log_file = self.layout.log_file(first.name)
        process = processes.start_in_own_group(argv, log_file, die_with_parent=self.die_with_parent)
        self.components[index] = dataclasses.replace(first, argv=argv, process=process)
        wait_healthy(
            first.name,
            f"{self.server}/{health}",
            process,
            log_file=log_file,
            timeout_seconds=APISERVER_START_SECONDS,
            context=self._admin_context(),
        )

    def _admin_context(self) -> ssl.SSLContext:
        return health.tls_context(
            self.layout.ca_cert,
            self.layout.client_cert("admin"),
            self.layout.client_key("admin"),
        )

    def stop(self) -> None:
        """Stops every component, last started first. Safe to call twice."""
        while self.components:
            component = self.components.pop()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(component.process.pid, signal.SIGCONT)  # a paused one cannot stop
            processes.stop_child(component.process)

    def component(self, name: str) -> Component:
        return next(c for c in self.components if c.name == name)

    def pause(self, name: str) -> None:
        """SIGSTOP the component (a stalled etcd, a frozen API server): sockets stay open,
        nothing answers."""
        os.killpg(self.component(name).process.pid, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        os.killpg(self.component(name).process.pid, signal.SIGCONT)

    def restart(self, name: str, *, kill: bool = False) -> None:
        """Stops the component (SIGTERM, or SIGKILL with `kill`) and starts it again with the
        same command line and data; returns once it answers its health endpoint."""
        component = self.component(name)
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(component.process.pid, signal.SIGKILL)
            component.process.wait()
        processes.stop_child(component.process)
        log_file = self.layout.log_file(name)
        component.process = processes.start_in_own_group(
            component.argv, log_file, die_with_parent=self.die_with_parent
        )
        health.wait_healthy(
            name,
            component.health_url,
            component.process,
            log_file=log_file,
            timeout_seconds=component.timeout_seconds,
            context=component.context_factory(),
        )


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
    control_plane.components.append(
        Component(name, argv, process, list(argv), health_url, timeout_seconds, context_factory)
    )
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
    layout.audit_policy.write_text(flags.AUDIT_POLICY)
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
            context_factory=control_plane._admin_context,
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
