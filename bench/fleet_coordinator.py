"""`gpuctl-coordinator` with its Kubernetes requests counted, for bench.fleet_scale.

    python -m bench.fleet_coordinator COUNTS_FILE [gpuctl-coordinator flags...]

Runs coordinator.main.main unchanged in this process, after wrapping the one client class it
talks to the API server through (coordinator.kube.client.Kube: `request` and `watch`) with a
counter. Every half second, and at exit, the counts so far go to COUNTS_FILE as JSON:
{"METHOD kind": n}, the kind being the resource (nodes, pods, gpunodes, events, ...) and
"WATCH kind" one per watch opened. The figures are the process's own: its memory and CPU are
read from /proc by the bench, and the wrapper adds one dict update per request.

With GPUCTL_BENCH_TRACEMALLOC=N in its environment it also traces allocations (N frames
each; slower, and more memory) and every 30 s writes where the live memory was allocated
(the 40 biggest sites, by traceback) to COUNTS_FILE with the suffix `.memory.txt`: what
holds the coordinator's memory at a given fleet size.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.request_kinds import resource_kind
from coordinator import main as coordinator_main
from coordinator.kube import client as kube_client

WRITE_SECONDS = 0.5
MEMORY_WRITE_SECONDS = 30.0
TRACEMALLOC = "GPUCTL_BENCH_TRACEMALLOC"


def write_memory_sites(target: Path) -> None:
    """The 40 biggest allocation sites of live memory, by traceback, into `target`."""
    snapshot = tracemalloc.take_snapshot()
    top = snapshot.statistics("traceback")[:40]
    lines = [f"traced {sum(s.size for s in snapshot.statistics('filename')) / 2**20:.1f} MiB"]
    for stat in top:
        lines.append(f"\n{stat.size / 2**20:.1f} MiB in {stat.count} blocks")
        lines.extend(f"    {frame}" for frame in stat.traceback.format())
    target.write_text("\n".join(lines))


def install_counter(counts: Counter[str], lock: threading.Lock) -> None:
    request = kube_client.Kube.request
    watch = kube_client.Kube.watch

    def counted_request(self: kube_client.Kube, method: str, resource_path: str, **kw: Any) -> Any:
        with lock:
            counts[f"{method} {resource_kind(resource_path)}"] += 1
        return request(self, method, resource_path, **kw)

    def counted_watch(
        self: kube_client.Kube, resource_path: str, query: dict[str, Any], timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        with lock:
            counts[f"WATCH {resource_kind(resource_path)}"] += 1
        return watch(self, resource_path, query, timeout_seconds)

    kube_client.Kube.request = counted_request  # type: ignore[method-assign]
    kube_client.Kube.watch = counted_watch  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    counts_file = Path(argv[0])
    counts: Counter[str] = Counter()
    lock = threading.Lock()
    install_counter(counts, lock)
    done = threading.Event()

    def write() -> None:
        with lock:
            text = json.dumps(dict(counts))
        staging = counts_file.with_suffix(".tmp")
        staging.write_text(text)
        staging.replace(counts_file)

    def keep_writing() -> None:
        while not done.wait(WRITE_SECONDS):
            write()

    threading.Thread(target=keep_writing, daemon=True).start()
    frames = int(os.environ.get(TRACEMALLOC, "0") or 0)
    if frames:
        tracemalloc.start(frames)
        memory_file = counts_file.with_suffix(".memory.txt")

        def keep_tracing() -> None:
            while not done.wait(MEMORY_WRITE_SECONDS):
                write_memory_sites(memory_file)

        threading.Thread(target=keep_tracing, daemon=True).start()
    try:
        return coordinator_main.main(argv[1:])
    finally:
        done.set()
        write()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
