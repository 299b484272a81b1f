"""gRPC health (grpc.health.v1.Health) for kubelet's grpc probes, computed on each call.

Service names: "" and "liveness" answer SERVING when the agent is healthy (see
agent.daemon.health), "readiness" answers SERVING when it is connected to the coordinator;
any other name is NOT_FOUND, as the health protocol asks. Check and List are answered from
the HealthState at the moment of the call, so a verdict that turns stale with time needs no
timer to update it; Watch (which would need one) is not offered.

Plaintext on its own port, as kubelet's grpc probe speaks no TLS; it reveals only these
two booleans.
"""

from __future__ import annotations

import grpc
import grpc.aio
from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]

from agent.daemon.health import HealthState

LIVENESS_NAMES = ("", "liveness")
READINESS = "readiness"


def _status(serving: bool) -> object:
    return (
        health_pb2.HealthCheckResponse.SERVING
        if serving
        else health_pb2.HealthCheckResponse.NOT_SERVING
    )


class AgentHealthServicer(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    def __init__(self, state: HealthState) -> None:
        self._state = state

    def _statuses(self) -> dict[str, object]:
        verdict = self._state.verdict()
        statuses = {name: _status(verdict.healthy) for name in LIVENESS_NAMES}
        statuses[READINESS] = _status(verdict.ready)
        return statuses

    async def Check(  # noqa: N802 - the gRPC method name
        self, request: object, context: grpc.aio.ServicerContext[object, object]
    ) -> object:
        service = str(request.service)  # type: ignore[attr-defined]
        statuses = self._statuses()
        if service not in statuses:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {service!r}")
        return health_pb2.HealthCheckResponse(status=statuses[service])

    async def List(  # noqa: N802 - the gRPC method name
        self, request: object, context: grpc.aio.ServicerContext[object, object]
    ) -> object:
        response = health_pb2.HealthListResponse()
        for name, status in self._statuses().items():
            response.statuses[name].status = status
        return response

    async def Watch(  # noqa: N802 - the gRPC method name
        self, request: object, context: grpc.aio.ServicerContext[object, object]
    ) -> None:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "use Check: Watch is not offered")


class HealthGrpcServer:
    """An aio gRPC server offering only grpc.health.v1.Health on (address, port)."""

    def __init__(self, state: HealthState, address: str, port: int) -> None:
        self._server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(AgentHealthServicer(state), self._server)
        try:
            self.port = self._server.add_insecure_port(f"{address}:{port}")
        except RuntimeError as error:  # grpc reports a failed bind this way
            raise OSError(f"cannot listen for gRPC health on {address}:{port}: {error}") from None
        if self.port == 0:
            raise OSError(f"cannot listen for gRPC health on {address}:{port}")

    async def start(self) -> None:
        await self._server.start()

    async def stop(self) -> None:
        await self._server.stop(grace=None)
