"""A small hand-written AgentService server for the agent's tests (not the real coordinator).

It speaks the contract of agent_service.proto over a real gRPC server on a real loopback
socket, plaintext or TLS: checks the bearer token against the tokens it knows (each bound to
one node, like a TokenReview of a bound token), answers Hello with a configurable Welcome,
records every stream's metadata and messages, and can send InspectRequests down the newest
stream. `stop()`/`start()` on the same port play a coordinator restart.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass, field

import grpc

from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from gpuctl.api.v1alpha1 import agent_service_pb2_grpc as api_grpc
from testbed.harness.certs import KeyPair
from testbed.harness.waiting import wait_until

WAIT_SECONDS = 20.0


@dataclass
class Stream:
    """What one Connect call brought."""

    metadata: dict[str, str]
    messages: list[api.AgentMessage] = field(default_factory=list)
    ended: bool = False
    outbox: queue.Queue[api.CoordinatorMessage | None] = field(default_factory=queue.Queue)

    def reports(self) -> list[api.ReportUpdate]:
        return [m.report for m in self.messages if m.WhichOneof("body") == "report"]

    def heartbeats(self) -> list[api.Heartbeat]:
        return [m.heartbeat for m in self.messages if m.WhichOneof("body") == "heartbeat"]


class FakeCoordinator(api_grpc.AgentServiceServicer):
    """The servicer plus its server; tokens maps token -> the node it is bound to."""

    def __init__(
        self,
        *,
        welcome: api.Welcome,
        tokens: Mapping[str, str],
        serving: KeyPair | None = None,
        port: int = 0,
        answer_hello_with: api.CoordinatorMessage | None = None,
    ) -> None:
        self.welcome = welcome
        # Misbehaviour on demand: answer Hello with this instead of the Welcome.
        self.answer_hello_with = answer_hello_with
        self.tokens = dict(tokens)
        self.serving = serving
        self.port = port
        self.streams: list[Stream] = []
        self.refusals: list[tuple[grpc.StatusCode, str]] = []
        self._changed = threading.Condition()
        self._server: grpc.Server | None = None

    # -- server lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        api_grpc.add_AgentServiceServicer_to_server(self, server)
        address = f"127.0.0.1:{self.port}"
        if self.serving is None:
            bound = server.add_insecure_port(address)
        else:
            credentials = grpc.ssl_server_credentials(
                [(self.serving.key_pem, self.serving.cert_pem)]
            )
            bound = server.add_secure_port(address, credentials)
        self.port = bound
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- the RPC ----------------------------------------------------------------------------

    def _refuse(self, context: grpc.ServicerContext, code: grpc.StatusCode, details: str) -> None:
        with self._changed:
            self.refusals.append((code, details))
            self._changed.notify_all()
        context.abort(code, details)

    def Connect(  # noqa: N802 - the gRPC method name
        self, request_iterator: Iterator[api.AgentMessage], context: grpc.ServicerContext
    ) -> Iterator[api.CoordinatorMessage]:
        metadata = {key: str(value) for key, value in context.invocation_metadata()}
        stream = Stream(metadata=metadata)
        with self._changed:
            self.streams.append(stream)
            self._changed.notify_all()
        authorization = metadata.get("authorization", "")
        token = authorization.removeprefix("Bearer ")
        if not authorization.startswith("Bearer ") or token not in self.tokens:
            self._refuse(context, grpc.StatusCode.UNAUTHENTICATED, "no valid bearer token")
        hello = next(request_iterator, None)
        if hello is None:
            return
        self._record(stream, hello)
        if hello.WhichOneof("body") != "hello":
            self._refuse(
                context, grpc.StatusCode.INVALID_ARGUMENT, "the first message must be Hello"
            )
        if hello.hello.node_name != self.tokens[token]:
            self._refuse(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"node mismatch: the token is bound to {self.tokens[token]}, "
                f"Hello names {hello.hello.node_name}",
            )
        context.add_callback(lambda: stream.outbox.put(None))
        threading.Thread(target=self._read, args=(stream, request_iterator), daemon=True).start()
        yield self.answer_hello_with or api.CoordinatorMessage(welcome=self.welcome)
        while (message := stream.outbox.get()) is not None:
            yield message

    def _record(self, stream: Stream, message: api.AgentMessage) -> None:
        with self._changed:
            stream.messages.append(message)
            self._changed.notify_all()

    def _read(self, stream: Stream, request_iterator: Iterator[api.AgentMessage]) -> None:
        try:
            for message in request_iterator:
                self._record(stream, message)
        except grpc.RpcError:
            pass
        finally:
            with self._changed:
                stream.ended = True
                self._changed.notify_all()
            stream.outbox.put(None)

    # -- what tests call --------------------------------------------------------------------

    def send(self, message: api.CoordinatorMessage) -> None:
        """Send `message` down the newest stream."""
        self.streams[-1].outbox.put(message)

    def send_inspect(self, request_id: str) -> None:
        """Ask the newest stream for a report."""
        self.send(api.CoordinatorMessage(inspect=api.InspectRequest(request_id=request_id)))

    def wait_for(self, description: str, probe: Callable[[], object]) -> object:
        return wait_until(description, probe, timeout_seconds=WAIT_SECONDS)

    def wait_reports(self, count: int, stream_index: int = -1) -> list[api.ReportUpdate]:
        def enough() -> list[api.ReportUpdate] | None:
            if not self.streams:
                return None
            reports = self.streams[stream_index].reports()
            return reports if len(reports) >= count else None

        result = wait_until(f"{count} reports arrived", enough, timeout_seconds=WAIT_SECONDS)
        return list(result)

    def wait_report_where(
        self, description: str, wanted: Callable[[api.ReportUpdate], bool]
    ) -> api.ReportUpdate:
        """The first report on the newest stream that shows the state `wanted` describes: a
        rescan may run while a test is still writing a change, and report it half made."""

        def find() -> api.ReportUpdate | None:
            if not self.streams:
                return None
            return next((r for r in self.streams[-1].reports() if wanted(r)), None)

        found: api.ReportUpdate = wait_until(
            f"a report showing {description}", find, timeout_seconds=WAIT_SECONDS
        )
        return found

    def wait_answer(self, kind: str, request_id: str) -> api.AgentMessage:
        """The agent's answer of `kind` ("report", "prepare_result", "restore_result") to
        request `request_id` on the newest stream."""

        def find() -> api.AgentMessage | None:
            for message in list(self.streams[-1].messages):
                if message.WhichOneof("body") == kind and getattr(message, kind).request_id == (
                    request_id
                ):
                    return message
            return None

        found = self.wait_for(f"the {kind} of {request_id}", find)
        assert isinstance(found, api.AgentMessage)
        return found

    def wait_streams(self, count: int) -> list[Stream]:
        result = wait_until(
            f"{count} streams opened",
            lambda: self.streams if len(self.streams) >= count else None,
            timeout_seconds=WAIT_SECONDS,
        )
        return list(result)


# The `make_coordinator` fixture (conftest.py): a started FakeCoordinator, stopped after the test.
MakeCoordinator = Callable[..., FakeCoordinator]
