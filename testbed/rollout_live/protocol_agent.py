"""A hand-written node agent for rollout tests: the real AgentService protocol over real
gRPC and TLS, answering from a fake host root.

It answers InspectRequests with the agent's own inspection of the root, and PrepareRequests
and RestoreRequests the way the contract in agent_service.proto says (for the tests, before
the real agent's prepare lands): prepare changes nothing when any function has open clients
or a VF is handed to a VM; otherwise, when allowed, it sets sriov_numvfs to 0 on PFs whose
VFs are idle and answers with the changes; restore re-enables VFs to their recorded count.
"""

from __future__ import annotations

import contextlib
import datetime
import queue
import threading
import time

import grpc

from agent.inspect import inspect_node
from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from testbed.agent_client import AgentClient
from testbed.fakehost import FakeHost
from testbed.rollout_live.fake_nodes import disable_vfs, enable_vfs

CONNECT_TIMEOUT_SECONDS = 30.0
BLOCKING_PREPARE = (
    report_pb.Blocker.OPEN_CLIENTS,
    report_pb.Blocker.CLIENTS_UNKNOWN,
    report_pb.Blocker.MODULE_HOLDERS,
    report_pb.Blocker.BUILTIN,
    report_pb.Blocker.TRANSITIONING,
    report_pb.Blocker.STATE_UNKNOWN,
)


class ProtocolAgent:
    """One node's agent stream; `close()` ends it."""

    def __init__(
        self, target: str, *, token: str, root_certificate: bytes, node: str, host: FakeHost
    ) -> None:
        self.node = node
        self.host = host
        self.prepares: list[agent_pb.PrepareRequest] = []
        self.restores: list[agent_pb.RestoreRequest] = []
        self._lock = threading.Lock()
        self.client = self._connect(target, token, root_certificate)
        self.client.answer_inspects(lambda _request_id: self.inspect())
        self.client.report(self.inspect(), trigger=agent_pb.ReportUpdate.CONNECTED)
        self.client.keep_heartbeating(0.5)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"agent-{node}", daemon=True)
        self._thread.start()

    def _connect(self, target: str, token: str, root_certificate: bytes) -> AgentClient:
        """Hello and Welcome, retried while the coordinator is not listening yet."""
        deadline = time.monotonic() + CONNECT_TIMEOUT_SECONDS
        while True:
            client = AgentClient(target, token=token, root_certificate=root_certificate)
            client.hello(self.node)
            try:
                client.welcome()
            except AssertionError:
                client.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
                continue
            return client

    def inspect(self) -> report_pb.NodeReport:
        with self._lock:
            return inspect_node(self.host.root, node_name=self.node, now=_now())

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                message = self.client.received.get(timeout=0.2)
            except queue.Empty:
                continue
            if isinstance(message, grpc.RpcError):
                return
            kind = message.WhichOneof("body")
            # As the real agent does, a DEVICE_EVENT report follows each answer.
            if kind == "prepare":
                result = self._prepare(message.prepare)
                self.client.send(agent_pb.AgentMessage(prepare_result=result))
                self.client.report(result.report)
            elif kind == "restore":
                done = self._restore(message.restore)
                self.client.send(agent_pb.AgentMessage(restore_result=done))
                self.client.report(done.report)

    def _prepare(self, request: agent_pb.PrepareRequest) -> agent_pb.PrepareResult:
        self.prepares.append(request)
        before = self.inspect()
        result = agent_pb.PrepareResult(request_id=request.request_id)
        held = [b for b in before.blockers if b.reason in BLOCKING_PREPARE]
        to_vm = {d.physfn for d in before.devices if d.physfn and d.driver not in ("", "xe")}
        vf_blockers = [
            b
            for b in before.blockers
            if b.reason == report_pb.Blocker.ACTIVE_VFS
            and (b.pci_address in to_vm or not request.allow_disable_vfs)
        ]
        if held or vf_blockers:
            result.ready = False
            result.blockers.extend([*held, *vf_blockers])
            result.report.CopyFrom(before)
            return result
        with self._lock:
            for device in before.devices:
                if device.sriov.num_vfs and request.allow_disable_vfs:
                    count = disable_vfs(self.host, device.pci_address)
                    result.changes.add(
                        disabled_vfs=agent_pb.DisabledVfs(
                            pci_address=device.pci_address, num_vfs=count
                        )
                    )
        after = self.inspect()
        result.report.CopyFrom(after)
        result.ready = not after.blockers
        result.blockers.extend(after.blockers)
        return result

    def _restore(self, request: agent_pb.RestoreRequest) -> agent_pb.RestoreResult:
        self.restores.append(request)
        result = agent_pb.RestoreResult(request_id=request.request_id)
        with self._lock:
            for change in reversed(request.changes):
                if change.WhichOneof("kind") != "disabled_vfs":
                    continue
                pf = change.disabled_vfs.pci_address
                now = (self.host.real(f"sys/bus/pci/devices/{pf}/sriov_numvfs")).read_text()
                if now.strip() == "0":
                    enable_vfs(self.host, pf, change.disabled_vfs.num_vfs)
                result.restored.append(change)
        result.report.CopyFrom(self.inspect())
        return result

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):
            self.client.close()
        self._thread.join(timeout=5)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
