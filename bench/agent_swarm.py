"""Thousands of simulated agents in a few processes, for bench.live_nodes.

Each agent opens its AgentService stream with its own bound token, says Hello, waits for the
Welcome, sends its first report, and then, when told to go, `reports` more reports, each
different from the last (a blocker appears and disappears), as fast as the stream takes them.
Every agent answers InspectRequests with a REQUESTED report, as the real agent does. Streams
are spread over several channels (HTTP/2 connections), `streams_per_connection` to each (100
by default, to spare the simulation; 1 is what agents on separate nodes make), and over
several processes (`SwarmProcesses`): one Python process driving more than about a
thousand grpc.aio client streams at once saw its own calls fail with CANCELLED, which is a
limit of the simulation, not of the server. As a real agent does, an agent whose Welcome does
not come (within HANDSHAKE_SECONDS) or whose stream fails before it gives up that stream and
connects again on a channel of its own (at most HANDSHAKE_ATTEMPTS times); the retries are
counted (`SwarmProcesses.handshake_retries`).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.synchronize
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from coordinator.kube.client import KubeApi, path
from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from gpuctl.common.names import AGENT_AUDIENCE

CONNECT = "/gpuctl.api.v1alpha1.AgentService/Connect"
STREAMS_PER_CONNECTION = 100
AGENTS_PER_PROCESS = 500
HANDSHAKE_SECONDS = 60.0
HANDSHAKE_ATTEMPTS = 5
RECONNECT_SECONDS = 1.0


def report_for(node: str, marker: int) -> report_pb.NodeReport:
    """A one-GPU node's report; odd markers have an open client (so every report differs)."""
    report = report_pb.NodeReport(node_name=node, kernel_release="6.8.0-45-generic")
    report.observed_at.FromSeconds(1_800_000_000 + marker)
    device = report.devices.add(
        pci_address="0000:03:00.0",
        vendor_id="0x8086",
        device_id="0xe20b",
        driver="xe",
        role=report_pb.Device.STANDALONE,
        platform="Battlemage G21",
    )
    report.module.name = "xe"
    report.module.state = report_pb.Module.LIVE
    report.module.backport_tag = "xeb_v7.1.4.6_260728.7"
    if marker % 2:
        device.clients.add(pid=4000 + marker, command="ollama", client_ids=[marker], fd_count=1)
        report.blockers.add(
            reason=report_pb.Blocker.OPEN_CLIENTS,
            message=f"1 process holds 0000:03:00.0 open: pid {4000 + marker} (ollama)",
            pci_address="0000:03:00.0",
        )
    return report


def _update(node: str, sequence: int, marker: int, trigger: int, request_id: str = "") -> bytes:
    update = agent_pb.ReportUpdate(
        report=report_for(node, marker),
        trigger=trigger,  # type: ignore[arg-type]
        sequence=sequence,
        request_id=request_id,
    )
    return agent_pb.AgentMessage(report=update).SerializeToString()


@dataclass
class Swarm:
    """The agents' shared state: how many are connected, the go and stop signals."""

    target: str
    root_certificate: bytes
    reports: int
    streams_per_connection: int = STREAMS_PER_CONNECTION
    connected: int = 0
    failed: list[str] = field(default_factory=list)
    # Called once per handshake given up and tried again.
    on_retry: Callable[[], None] = lambda: None
    go: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def _credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(root_certificates=self.root_certificate)

    async def _handshake(
        self, channel: grpc.aio.Channel, node: str, token: str
    ) -> grpc.aio.StreamStreamCall[bytes, bytes]:
        """A stream that got its Welcome and carries the first report."""
        method: grpc.aio.StreamStreamMultiCallable[bytes, bytes]
        method = channel.stream_stream(CONNECT, request_serializer=None, response_deserializer=None)
        call: grpc.aio.StreamStreamCall[bytes, bytes] = method(
            metadata=(("authorization", f"Bearer {token}"),)
        )
        try:
            hello = agent_pb.Hello(node_name=node, agent_version="bench", boot_id="b")
            await call.write(agent_pb.AgentMessage(hello=hello).SerializeToString())
            await asyncio.wait_for(call.read(), HANDSHAKE_SECONDS)  # the Welcome
            await call.write(_update(node, 1, 0, agent_pb.ReportUpdate.CONNECTED))
        except BaseException:
            call.cancel()
            raise
        return call

    async def _connect(
        self, channel: grpc.aio.Channel, node: str, token: str, own: list[grpc.aio.Channel]
    ) -> grpc.aio.StreamStreamCall[bytes, bytes]:
        """The handshake, tried again on a channel of the agent's own (kept in `own`, for the
        caller to close) after a timeout or a failed stream."""
        for _ in range(HANDSHAKE_ATTEMPTS - 1):
            try:
                return await self._handshake(channel, node, token)
            except (TimeoutError, grpc.aio.AioRpcError):
                self.on_retry()
            await asyncio.sleep(RECONNECT_SECONDS)
            channel = grpc.aio.secure_channel(self.target, self._credentials())
            own.append(channel)
        return await self._handshake(channel, node, token)

    async def _agent(self, channel: grpc.aio.Channel, node: str, token: str) -> None:
        own: list[grpc.aio.Channel] = []
        lock = asyncio.Lock()
        sequence = 1
        try:
            call = await self._connect(channel, node, token, own)
        except (TimeoutError, grpc.aio.AioRpcError) as err:
            self.failed.append(f"{node}: no Welcome after {HANDSHAKE_ATTEMPTS} attempts: {err!r}")
            return
        try:
            self.connected += 1

            async def answer_inspects() -> None:
                nonlocal sequence
                while True:
                    raw = await call.read()
                    if not isinstance(raw, bytes):
                        return  # grpc.aio.EOF: the coordinator closed the stream
                    message = agent_pb.CoordinatorMessage.FromString(raw)
                    if message.WhichOneof("body") == "inspect":
                        async with lock:
                            sequence += 1
                            await call.write(
                                _update(
                                    node,
                                    sequence,
                                    0,
                                    agent_pb.ReportUpdate.REQUESTED,
                                    message.inspect.request_id,
                                )
                            )

            reader = asyncio.create_task(answer_inspects())
            await self.go.wait()
            for marker in range(1, self.reports + 1):
                async with lock:
                    sequence += 1
                    await call.write(_update(node, sequence, marker, agent_pb.ReportUpdate.RESCAN))
            await self.stop.wait()
            reader.cancel()
        except grpc.aio.AioRpcError as err:
            self.failed.append(f"{node}: {err.code().name} {err.details()}")
        finally:
            call.cancel()
            for own_channel in own:
                await own_channel.close()

    async def run(self, agents: Sequence[tuple[str, str]]) -> None:
        """Run every (node, token) agent until `stop` is set."""
        credentials = self._credentials()
        per_connection = self.streams_per_connection
        channels = [
            grpc.aio.secure_channel(self.target, credentials)
            for _ in range(0, len(agents), per_connection)
        ]
        try:
            await asyncio.gather(
                *(
                    self._agent(channels[index // per_connection], node, token)
                    for index, (node, token) in enumerate(agents)
                )
            )
        finally:
            for channel in channels:
                await channel.close()


def _process_main(
    swarm_args: tuple[str, bytes, int, int],
    agents: Sequence[tuple[str, str]],
    *,
    go: multiprocessing.synchronize.Event,
    stop: multiprocessing.synchronize.Event,
    failures: multiprocessing.Queue[str],
    retries: Any,
) -> None:
    def count_retry() -> None:
        with retries.get_lock():
            retries.value += 1

    async def main() -> None:
        swarm = Swarm(*swarm_args, on_retry=count_retry)
        running = asyncio.create_task(swarm.run(agents))
        await asyncio.to_thread(go.wait)
        swarm.go.set()
        await asyncio.to_thread(stop.wait)
        swarm.stop.set()
        await running
        for failure in swarm.failed:
            failures.put(failure)

    asyncio.run(main())


class SwarmProcesses:
    """`agents` split over processes of AGENTS_PER_PROCESS; go() and stop() signal them all."""

    def __init__(
        self,
        target: str,
        root_certificate: bytes,
        reports: int,
        agents: Sequence[tuple[str, str]],
        streams_per_connection: int = STREAMS_PER_CONNECTION,
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self._go, self._stop = context.Event(), context.Event()
        self.failures: multiprocessing.Queue[str] = context.Queue()
        self._retries = context.Value("i", 0)
        self._processes = [
            context.Process(
                target=_process_main,
                args=(
                    (target, root_certificate, reports, streams_per_connection),
                    list(agents[start : start + AGENTS_PER_PROCESS]),
                ),
                kwargs={
                    "go": self._go,
                    "stop": self._stop,
                    "failures": self.failures,
                    "retries": self._retries,
                },
                daemon=True,
            )
            for start in range(0, len(agents), AGENTS_PER_PROCESS)
        ]
        for process in self._processes:
            process.start()

    def go(self) -> None:
        self._go.set()

    @property
    def handshake_retries(self) -> int:
        """Handshakes the agents gave up and tried again, so far."""
        return int(self._retries.value)

    def stop(self) -> None:
        self._go.set()
        self._stop.set()
        for process in self._processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()


def agent_token(kube: KubeApi, namespace: str, service_account: str, node: str) -> str:
    """A simulated agent's identity on `node`: its Pod there (never run) and a token of
    `service_account` bound to that Pod, as the kubelet would project it."""
    pod = kube.request(
        "POST",
        path("", "v1", "pods", namespace=namespace),
        body={
            "metadata": {"name": f"agent-{node}"},
            "spec": {
                "nodeName": node,
                "serviceAccountName": service_account,
                "automountServiceAccountToken": False,
                "containers": [{"name": "agent", "image": "registry.invalid/agent"}],
            },
        },
    )
    answer = kube.request(
        "POST",
        path("", "v1", "serviceaccounts", namespace=namespace, name=service_account) + "/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [AGENT_AUDIENCE],
                "expirationSeconds": 7200,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod["metadata"]["name"],
                    "uid": pod["metadata"]["uid"],
                },
            },
        },
    )
    return str(answer["status"]["token"])
