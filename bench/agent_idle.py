"""The agent daemon at rest: CPU over a quiet minute and resident memory, against a baseline.

Starts `gpuctl-agent run` on a fake host root (scenario 3: two Pro B70 with 4 VFs each)
connected over TLS to a minimal in-bench AgentService server that welcomes it with
production-like intervals (heartbeat 30 s, rescan 300 s, unless given), with udev and both
health servers on. After the first report and a settling pause, both processes below are
measured over the same window:
- the agent: CPU (utime + stime of all its threads from /proc/<pid>/stat, in clock ticks,
  and the nanosecond sum of /proc/<pid>/task/*/schedstat) and VmRSS;
- baseline: `python -c "import grpc, time; time.sleep(...)"`, the interpreter + grpc floor
  every Python gRPC process pays;
- baseline with a channel: the same plus one open, idle TLS channel to the same server,
  i.e. grpc-core's own background threads (timers, event engine), which the agent cannot
  avoid either.
Printed: the figures, the ratios, and what the server received in the window.

    .venv/bin/python -m bench.agent_idle [--seconds 60] [--heartbeat 30] [--rescan 300]
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
from google.protobuf import duration_pb2

from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from gpuctl.api.v1alpha1 import agent_service_pb2_grpc as api_grpc
from testbed.fakehost.scenarios import two_pro_b70_with_vfs
from testbed.harness.certs import make_ca, make_serving_cert
from testbed.harness.ports import free_loopback_ports

TOKEN = "bench-token"  # noqa: S105 - the in-bench server's only token
NODE = "bench-node"
SETTLE_SECONDS = 5.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
AGENT = Path(sys.executable).with_name("gpuctl-agent")


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of `pid`, from /proc/<pid>/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    # After "(comm) ": state is field 3, utime field 14, stime field 15 (1-based).
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def run_ns(pid: int) -> int:
    """Nanoseconds on a CPU of every live thread of `pid` (first field of schedstat): the
    precise figure where whole clock ticks round a quiet process down to zero."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that just exited
    return total


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


@dataclass
class Received:
    reports: int = 0
    heartbeats: int = 0


class BenchServer(api_grpc.AgentServiceServicer):
    """Welcomes one agent and counts what it sends."""

    def __init__(self, welcome: api.Welcome) -> None:
        self.welcome = welcome
        self.received = Received()
        self.first_report = threading.Event()
        self._lock = threading.Lock()

    def Connect(  # noqa: N802 - the gRPC method name
        self, request_iterator: Iterator[api.AgentMessage], context: grpc.ServicerContext
    ) -> Iterator[api.CoordinatorMessage]:
        metadata = dict(context.invocation_metadata())
        if metadata.get("authorization") != f"Bearer {TOKEN}":
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "no valid bearer token")
        if next(request_iterator, None) is None:
            return
        yield api.CoordinatorMessage(welcome=self.welcome)
        for message in request_iterator:
            kind = message.WhichOneof("body")
            with self._lock:
                if kind == "report":
                    self.received.reports += 1
                    self.first_report.set()
                elif kind == "heartbeat":
                    self.received.heartbeats += 1

    def snapshot(self) -> Received:
        with self._lock:
            return Received(self.received.reports, self.received.heartbeats)


CHANNEL_BASELINE = """
import time, grpc
credentials = grpc.ssl_channel_credentials(open("{ca}", "rb").read())
channel = grpc.secure_channel("127.0.0.1:{port}", credentials)
grpc.channel_ready_future(channel).result(timeout=30)
time.sleep({sleep})
"""


@dataclass(frozen=True)
class Figures:
    stat_seconds: float
    run_seconds: float
    rss_kib: int

    def line(self, elapsed: float) -> str:
        return (
            f"CPU {self.stat_seconds * 1e3:5.0f} ms by stat ticks, "
            f"{self.run_seconds * 1e3:7.1f} ms by schedstat "
            f"({self.run_seconds / elapsed * 100:.3f}% of a core); "
            f"RSS {self.rss_kib / 1024:5.1f} MiB"
        )

    def ratios(self, baseline: Figures) -> str:
        cpu = (
            f"{self.run_seconds / baseline.run_seconds:.1f}"
            if baseline.run_seconds > 0
            else "n/a (baseline used no CPU)"
        )
        return f"CPU {cpu} (schedstat), RSS {self.rss_kib / baseline.rss_kib:.2f}"


def duration(seconds: float) -> duration_pb2.Duration:
    value = duration_pb2.Duration()
    value.FromTimedelta(datetime.timedelta(seconds=seconds))
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--heartbeat", type=float, default=30.0)
    parser.add_argument("--rescan", type=float, default=300.0)
    args = parser.parse_args()
    welcome = api.Welcome(
        heartbeat_interval=duration(args.heartbeat),
        rescan_interval=duration(args.rescan),
        max_reports_per_minute=60,
    )
    now = datetime.datetime.now(datetime.UTC)
    ca = make_ca(now)
    serving = make_serving_cert(ca, now)
    servicer = BenchServer(welcome)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    api_grpc.add_AgentServiceServicer_to_server(servicer, server)
    port = server.add_secure_port(
        "127.0.0.1:0", grpc.ssl_server_credentials([(serving.key_pem, serving.cert_pem)])
    )
    server.start()
    health_port, grpc_health_port = free_loopback_ports(2)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "host"
        two_pro_b70_with_vfs(root)
        (Path(tmp) / "ca.pem").write_bytes(ca.cert_pem)
        (Path(tmp) / "token").write_text(TOKEN + "\n")
        agent = subprocess.Popen(
            [
                str(AGENT),
                "run",
                f"--coordinator=127.0.0.1:{port}",
                f"--ca-file={tmp}/ca.pem",
                f"--token-file={tmp}/token",
                f"--host-root={root}",
                f"--node-name={NODE}",
                "--health-address=127.0.0.1",
                f"--health-port={health_port}",
                f"--grpc-health-port={grpc_health_port}",
            ],
            stderr=subprocess.DEVNULL,
        )
        sleep_for = SETTLE_SECONDS + args.seconds + 30
        baseline = subprocess.Popen(
            [sys.executable, "-c", f"import grpc, time; time.sleep({sleep_for})"]
        )
        with_channel = subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHANNEL_BASELINE.format(port=port, ca=f"{tmp}/ca.pem", sleep=sleep_for),
            ]
        )
        try:
            if not servicer.first_report.wait(30):
                print("the agent sent no report within 30 s", file=sys.stderr)
                return 1
            time.sleep(SETTLE_SECONDS)
            before = servicer.snapshot()
            pids = (agent.pid, baseline.pid, with_channel.pid)
            ticks = {pid: cpu_seconds(pid) for pid in pids}
            nanos = {pid: run_ns(pid) for pid in pids}
            started = time.monotonic()
            time.sleep(args.seconds)
            elapsed = time.monotonic() - started
            figures = {
                pid: Figures(
                    stat_seconds=cpu_seconds(pid) - ticks[pid],
                    run_seconds=(run_ns(pid) - nanos[pid]) / 1e9,
                    rss_kib=rss_kib(pid),
                )
                for pid in pids
            }
            after = servicer.snapshot()
        finally:
            for process in (agent, baseline, with_channel):
                process.terminate()
            agent_exit = agent.wait(20)
            baseline.wait(20)
            with_channel.wait(20)
            server.stop(grace=None)
    print(
        f"window {elapsed:.1f} s (heartbeat {args.heartbeat:g} s, rescan {args.rescan:g} s, "
        "udev on, both health servers on, TLS); "
        f"agent sent {after.reports - before.reports} reports, "
        f"{after.heartbeats - before.heartbeats} heartbeats in it"
    )
    rows = (
        ("agent (gpuctl-agent run)", figures[agent.pid]),
        ("baseline: python + import grpc", figures[baseline.pid]),
        ("baseline: + one idle TLS channel", figures[with_channel.pid]),
    )
    for label, figure in rows:
        print(f"{label:34s} {figure.line(elapsed)}")
    agent_figures = figures[agent.pid]
    for label, figure in rows[1:]:
        print(f"ratio agent / {label.removeprefix('baseline: ')}: {agent_figures.ratios(figure)}")
    print(f"agent exit status after SIGTERM: {agent_exit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
