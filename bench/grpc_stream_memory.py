"""What an open gRPC stream costs a grpc.aio server in memory, against the idle server.

    .venv/bin/python -m bench.grpc_stream_memory [--streams 2000]

One process serves a bidi-streaming method (it reads and keeps the call open, as the
coordinator's AgentService does) on a plain grpc.aio server; client processes open
`--streams` calls, 100 per HTTP/2 connection as bench.agent_swarm does, and send one message
each. Printed: the server's RSS idle (the baseline) and with every stream open, and the
difference per stream: the floor under the coordinator's memory per agent session, before
any of its own state.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import multiprocessing.synchronize
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

SERVICE, METHOD = "bench.Streams", "Connect"
STREAMS_PER_CHANNEL = 100
STREAMS_PER_PROCESS = 500


def rss_mib() -> float:
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _serve(
    port: int,
    streams: int,
    ready: multiprocessing.synchronize.Event,
    measure: multiprocessing.synchronize.Event,
) -> None:
    async def connect(requests: AsyncIterator[bytes], _context: object) -> AsyncIterator[bytes]:
        async for _ in requests:
            pass
        if False:  # a generator that yields nothing: the stream stays open until the client ends
            yield b""

    handler = grpc.method_handlers_generic_handler(
        SERVICE, {METHOD: grpc.stream_stream_rpc_method_handler(connect)}
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    idle = rss_mib()
    ready.set()
    while not measure.is_set():
        await asyncio.sleep(0.2)
    loaded = rss_mib()
    per_stream = (loaded - idle) * 1024 / streams
    print(
        f"grpc.aio server RSS: idle {idle:.1f} MiB (baseline), {streams} streams open "
        f"{loaded:.1f} MiB (ratio {loaded / idle:.2f}); {per_stream:.1f} KiB per stream"
    )
    await server.stop(0)


def _server_main(
    port: int,
    streams: int,
    ready: multiprocessing.synchronize.Event,
    measure: multiprocessing.synchronize.Event,
) -> None:
    asyncio.run(_serve(port, streams, ready, measure))


async def _clients(port: int, count: int, opened: multiprocessing.synchronize.Event) -> None:
    channels = [
        grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        for _ in range((count + STREAMS_PER_CHANNEL - 1) // STREAMS_PER_CHANNEL)
    ]
    calls: list[Any] = []
    for index in range(count):
        call: Any = channels[index // STREAMS_PER_CHANNEL].stream_stream(f"/{SERVICE}/{METHOD}")()
        await call.write(b"hello" * 100)
        calls.append(call)
    opened.set()
    await asyncio.sleep(3600)


def _client_main(port: int, count: int, opened: multiprocessing.synchronize.Event) -> None:
    asyncio.run(_clients(port, count, opened))


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--port", type=int, default=50999)
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    ready, measure = context.Event(), context.Event()
    server = context.Process(target=_server_main, args=(args.port, args.streams, ready, measure))
    server.start()
    ready.wait(60)
    counts = [
        min(STREAMS_PER_PROCESS, args.streams - start)
        for start in range(0, args.streams, STREAMS_PER_PROCESS)
    ]
    opened = [context.Event() for _ in counts]
    clients = [
        context.Process(target=_client_main, args=(args.port, count, event), daemon=True)
        for count, event in zip(counts, opened, strict=True)
    ]
    for client in clients:
        client.start()
    for event in opened:
        if not event.wait(300):
            # A stream the server never took blocks its client's write (at 5,000 streams a
            # client process once waited for good); the server, waiting to be told to
            # measure, would keep this process from exiting.
            print("the client processes did not open every stream in 300 s", file=sys.stderr)
            server.terminate()
            return 1
    measure.set()
    server.join(60)
    for client in clients:
        client.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
