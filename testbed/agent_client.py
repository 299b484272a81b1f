"""A small hand-written AgentService client for tests: real gRPC, real sockets, real TLS.

It sends exactly what a test tells it to, raw bytes included, so tests can speak for a
well-behaved agent or a broken/hostile one. Requests go out as bytes (no client-side
serializer), answers are parsed as CoordinatorMessage. `answer_inspects` makes it reply to
InspectRequests by itself, as the real agent does.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb

CONNECT = "/gpuctl.api.v1alpha1.AgentService/Connect"
_END = object()


def sample_report(
    node: str, blockers: tuple[tuple[int, str], ...] = (), *, observed_seconds: int = 1
) -> report_pb.NodeReport:
    """A plausible report: one PF bound to xe with one VF, an out-of-tree module."""
    report = report_pb.NodeReport(node_name=node, kernel_release="6.8.0-45-generic")
    # A BIOS boot: any module loads (the rollout's signature preflight blocks on unknown).
    trust = report.kernel_trust
    trust.secure_boot = report_pb.KernelTrust.SECURE_BOOT_NOT_EFI
    trust.lockdown = report_pb.KernelTrust.LOCKDOWN_NONE
    trust.sig_enforce = report_pb.KernelTrust.SIG_ENFORCE_OFF
    trust.signatures = report_pb.KernelTrust.SIGNATURES_NOT_ENFORCED
    report.observed_at.FromSeconds(1_800_000_000 + observed_seconds)
    report.devices.add(
        pci_address="0000:03:00.0",
        vendor_id="0x8086",
        device_id="0xe20b",
        driver="xe",
        role=report_pb.Device.PHYSICAL,
        platform="Battlemage G21",
    )
    report.devices.add(
        pci_address="0000:03:00.1",
        vendor_id="0x8086",
        device_id="0xe20b",
        driver="vfio-pci",
        role=report_pb.Device.VIRTUAL,
        physfn="0000:03:00.0",
    )
    report.module.name = "xe"
    report.module.state = report_pb.Module.LIVE
    report.module.backport_tag = "xeb_v7.1.4.6_260728.7"
    for reason, message in blockers:
        report.blockers.add(reason=reason, message=message)
    return report


OPEN_CLIENTS = (
    report_pb.Blocker.OPEN_CLIENTS,
    "1 process holds 0000:03:00.0 open: pid 42 (ollama)",
)


class AgentClient:
    """One Connect stream. Use as a context manager, or call close()."""

    def __init__(
        self,
        target: str,
        *,
        token: str | None,
        root_certificate: bytes | None,
        metadata: tuple[tuple[str, str], ...] = (),
    ) -> None:
        if root_certificate is None:
            self._channel = grpc.insecure_channel(target)
        else:
            self._channel = grpc.secure_channel(
                target, grpc.ssl_channel_credentials(root_certificates=root_certificate)
            )
        self._outbox: queue.Queue[Any] = queue.Queue()
        self.received: queue.Queue[agent_pb.CoordinatorMessage | grpc.RpcError] = queue.Queue()
        self.sequence = 0
        self._answer: Callable[[str], report_pb.NodeReport] | None = None
        self._closed = threading.Event()
        call_metadata: list[tuple[str, str | bytes]] = list(metadata)
        if token is not None:
            call_metadata.append(("authorization", f"Bearer {token}"))
        method: grpc.StreamStreamMultiCallable[bytes, agent_pb.CoordinatorMessage]
        method = self._channel.stream_stream(
            CONNECT,
            request_serializer=None,
            response_deserializer=agent_pb.CoordinatorMessage.FromString,
        )
        self._call = method(self._requests(), metadata=tuple(call_metadata))
        self._reader = threading.Thread(target=self._read, name="test-agent-reader", daemon=True)
        self._reader.start()

    def _requests(self) -> Iterator[bytes]:
        while True:
            item = self._outbox.get()
            if item is _END:
                return
            yield item

    def _read(self) -> None:
        try:
            for message in self._call:
                if message.WhichOneof("body") == "inspect" and self._answer is not None:
                    request_id = message.inspect.request_id
                    self.report(
                        self._answer(request_id),
                        trigger=agent_pb.ReportUpdate.REQUESTED,
                        request_id=request_id,
                    )
                self.received.put(message)
        except grpc.RpcError as err:
            self.received.put(err)

    # -- sending ------------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        self._outbox.put(data)

    def send(self, message: agent_pb.AgentMessage) -> None:
        self.send_raw(message.SerializeToString())

    def hello(self, node: str, version: str = "test-0.1", boot_id: str = "boot-1") -> None:
        self.send(
            agent_pb.AgentMessage(
                hello=agent_pb.Hello(node_name=node, agent_version=version, boot_id=boot_id)
            )
        )

    def report(
        self,
        report: report_pb.NodeReport,
        trigger: int = agent_pb.ReportUpdate.DEVICE_EVENT,
        request_id: str = "",
    ) -> None:
        self.sequence += 1
        update = agent_pb.ReportUpdate(
            report=report,
            trigger=trigger,  # type: ignore[arg-type]
            request_id=request_id,
            sequence=self.sequence,
        )
        self.send(agent_pb.AgentMessage(report=update))

    def heartbeat(self) -> None:
        self.send(agent_pb.AgentMessage(heartbeat=agent_pb.Heartbeat(last_sequence=self.sequence)))

    def answer_inspects(self, make_report: Callable[[str], report_pb.NodeReport]) -> None:
        """From now on, answer every InspectRequest with make_report(request_id)."""
        self._answer = make_report

    def keep_heartbeating(self, interval: float) -> None:
        """Send a Heartbeat every `interval` seconds until closed, as the real agent does."""

        def beat() -> None:
            while not self._closed.wait(interval):
                self.heartbeat()

        threading.Thread(target=beat, name="test-agent-heartbeat", daemon=True).start()

    def stop_answering(self) -> None:
        """From now on, leave InspectRequests unanswered (a hung agent)."""
        self._answer = None

    # -- receiving ----------------------------------------------------------------------------

    def next_message(self, timeout: float = 10.0) -> agent_pb.CoordinatorMessage:
        item = self.received.get(timeout=timeout)
        if isinstance(item, grpc.RpcError):
            raise AssertionError(f"stream ended: {item.code()} {item.details()}")
        return item

    def welcome(self, timeout: float = 10.0) -> agent_pb.Welcome:
        message = self.next_message(timeout)
        assert message.WhichOneof("body") == "welcome", message
        return message.welcome

    def final_status(self, timeout: float = 10.0) -> tuple[grpc.StatusCode, str]:
        """Waits for the stream to end; its status code and details."""
        while True:
            item = self.received.get(timeout=timeout)
            if isinstance(item, grpc.RpcError):
                return item.code(), str(item.details())

    def close(self) -> None:
        self._closed.set()
        self._outbox.put(_END)
        with contextlib.suppress(Exception):
            self._call.cancel()
        self._channel.close()
        self._reader.join(timeout=5)

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
