"""Run the agent daemon in-process against a FakeCoordinator, with real sockets and TLS.

`running_agent(config)` starts AgentDaemon on its own event loop in a thread and stops it
(the same `stop` event SIGTERM sets) on exit. `LogRecords` collects the daemon's log records
so tests can read what it said about failures. `Pki` is a test CA with a serving
certificate for 127.0.0.1/localhost, written to files as the agent reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from google.protobuf import duration_pb2

from agent.daemon.backoff import Backoff
from agent.daemon.config import DaemonConfig
from agent.daemon.runner import AgentDaemon, Inspector
from agent.daemon.uevents import EventSource
from agent.inspect import inspect_node
from agent.sysfs_write import SysfsWriter
from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from gpuctl.rpc.grpc_client import ClientTransport
from testbed.harness.certs import KeyPair, make_ca, make_serving_cert

NODE = "gpu-node-1"
TOKEN = "token-of-gpu-node-1"  # noqa: S105 - a test token
AGENT_VERSION = "0.1.0-test"


def seconds(value: float) -> duration_pb2.Duration:
    duration = duration_pb2.Duration()
    duration.FromTimedelta(datetime.timedelta(seconds=value))
    return duration


def welcome(*, heartbeat: float = 30.0, rescan: float = 300.0, rate: int = 0) -> api.Welcome:
    return api.Welcome(
        heartbeat_interval=seconds(heartbeat),
        rescan_interval=seconds(rescan),
        max_reports_per_minute=rate,
    )


@dataclass(frozen=True)
class Pki:
    ca_file: Path
    serving: KeyPair


def make_pki(directory: Path, name: str = "ca.pem") -> Pki:
    ca = make_ca(datetime.datetime.now(datetime.UTC))
    path = directory / name
    path.write_bytes(ca.cert_pem)
    return Pki(path, make_serving_cert(ca, datetime.datetime.now(datetime.UTC)))


def agent_config(
    host_root: Path,
    token_file: Path,
    transport: ClientTransport,
    **overrides: object,
) -> DaemonConfig:
    """A config for tests: small backoff, no health ports, no udev unless asked."""
    config = DaemonConfig(
        host_root=host_root,
        node_name=NODE,
        transport=transport,
        token_file=token_file,
        health_address="127.0.0.1",
        health_port=0,
        grpc_health_port=0,
        backoff=Backoff(initial=0.05, cap=0.2),
        welcome_timeout=5.0,
        udev=False,
    )
    return replace(config, **overrides)  # type: ignore[arg-type]


class LogRecords(logging.Handler):
    """Keeps every record of the `agent` loggers."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._lock2 = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock2:
            self.records.append(record)

    def reasons(self) -> list[str]:
        """The `reason` of every "not connected" warning, in order."""
        with self._lock2:
            return [str(r.__dict__.get("reason")) for r in self.records if hasattr(r, "reason")]


@dataclass
class RunningAgent:
    daemon: AgentDaemon
    logs: LogRecords


@contextmanager
def running_agent(
    config: DaemonConfig,
    event_source: Callable[[], EventSource] | None = None,
    inspect: Inspector | None = None,
    writer: SysfsWriter | None = None,
) -> Iterator[RunningAgent]:
    logs = LogRecords()
    logger = logging.getLogger("agent")
    logger.addHandler(logs)
    logger.setLevel(logging.DEBUG)
    daemon = AgentDaemon(
        config,
        inspect=inspect
        or (lambda now: inspect_node(config.host_root, node_name=config.node_name, now=now)),
        agent_version=AGENT_VERSION,
        uniform=random.Random(7).uniform,  # noqa: S311 - backoff jitter, not secrecy
        event_source=event_source,
        writer=writer,
    )
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    started = threading.Event()
    failure: list[BaseException] = []

    async def main() -> None:
        started.set()
        await daemon.run(stop)

    def thread_main() -> None:
        try:
            loop.run_until_complete(main())
        except BaseException as error:  # reported by the test below
            failure.append(error)
            started.set()
        finally:
            loop.close()

    thread = threading.Thread(target=thread_main, name="agent-under-test", daemon=True)
    thread.start()
    started.wait(10)
    daemon.listening.wait(10)
    try:
        yield RunningAgent(daemon, logs)
    finally:
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(stop.set)
        thread.join(15)
        logger.removeHandler(logs)
        assert not thread.is_alive(), "the agent did not stop"
        assert not failure, f"the agent crashed: {failure!r}"


def rotate_token(token_file: Path, token: str) -> None:
    """Replace the token as kubelet does, atomically: a reader sees the old token or the new
    one, never a half-written file."""
    staged = token_file.with_name(f".{token_file.name}.new")
    staged.write_text(token + "\n")
    staged.replace(token_file)
