"""The coordinator's liveness (loops' heartbeats) and readiness (Lease read, caches synced),
and the HTTP endpoints that answer kubelet's probes."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from coordinator.health import Heartbeat, Liveness, Verdict
from coordinator.kube.client import KubeError, path
from coordinator.kube.workqueue import WorkQueue, run_worker
from coordinator.live_nodes.server import AgentServer, ServerConfig
from coordinator.live_nodes.streams.agent_service import AgentServiceConfig
from coordinator.live_nodes.streams.registry import Registry
from coordinator.manager import Coordinator, CoordinatorConfig
from coordinator.metrics_http import HealthChecks, serve_metrics, stop_metrics
from coordinator.rollout.metrics import RolloutMetrics
from testbed.harness.waiting import wait_until
from tests.support.clock import ManualClock
from tests.support.memory_api import MemoryApi

LEASE = path("coordination.k8s.io", "v1", "leases", namespace="ns", name="gpuctl-coordinator")


def test_a_loop_that_keeps_beating_is_alive_and_one_that_stops_is_wedged() -> None:
    clock = ManualClock()
    liveness = Liveness(clock)
    liveness.beat("lease", within=90)
    liveness.beat("reconcile-worker", within=300)
    clock.advance(89)
    assert liveness.verdict() == Verdict(True, "turning: lease, reconcile-worker")
    liveness.beat("lease", within=90)
    clock.advance(250)
    verdict = liveness.verdict()
    assert not verdict.ok
    assert verdict.reason == "wedged: lease (160s overdue), reconcile-worker (39s overdue)"


def test_a_loop_that_ended_on_purpose_owes_no_beat() -> None:
    clock = ManualClock()
    liveness = Liveness(clock)
    liveness.beat("rollout-worker", within=10)
    liveness.rest("rollout-worker")
    clock.advance(1000)
    assert liveness.verdict().ok


def test_a_worker_stuck_in_one_pass_becomes_overdue_and_rests_when_stopped() -> None:
    clock = ManualClock()
    liveness = Liveness(clock)
    queue = WorkQueue(clock)
    stop, in_pass, release = threading.Event(), threading.Event(), threading.Event()

    def stuck_pass(_key: str) -> float | None:
        in_pass.set()
        release.wait(30)
        return None

    queue.add("gpu")
    worker = threading.Thread(
        target=run_worker,
        args=(queue, stuck_pass, stop),
        kwargs={
            "error_retry_seconds": 1.0,
            "failure": "pass failed",
            "key_name": "gpudriver",
            "heartbeat": Heartbeat(liveness, "reconcile-worker", 300),
        },
    )
    worker.start()
    try:
        assert in_pass.wait(30)
        clock.advance(299)
        assert liveness.verdict().ok
        clock.advance(2)
        assert liveness.verdict() == Verdict(False, "wedged: reconcile-worker (1s overdue)")
    finally:
        stop.set()
        release.set()
        worker.join(30)
    assert not worker.is_alive()
    assert liveness.verdict() == Verdict(True, "turning: no loop running")


def coordinator(api: MemoryApi, clock: ManualClock) -> Coordinator:
    config = CoordinatorConfig(namespace="ns", identity="me", lease_duration=15.0)
    return Coordinator(api, config, wall_clock=clock.wall, monotonic=clock)


def test_not_ready_before_the_lease_is_read_and_when_it_cannot_be_read() -> None:
    api, clock = MemoryApi(), ManualClock()
    c = coordinator(api, clock)
    assert c.readiness() == Verdict(False, "has not read the Lease yet")
    other = {
        "metadata": {"name": "gpuctl-coordinator", "namespace": "ns"},
        "spec": {
            "holderIdentity": "other",
            "renewTime": "2026-11-30T00:00:00.000000Z",
            "leaseDurationSeconds": 15,
        },
    }
    api.store(LEASE, other)
    assert not c.elector.try_acquire_or_renew()
    assert c.readiness() == Verdict(True, "standby, ready to lead")
    api.answer("GET", LEASE, KubeError(403, "Forbidden"))
    clock.advance(16)
    assert not c.elector.try_acquire_or_renew()
    assert c.readiness() == Verdict(False, "could not read the Lease for 16s")


def test_a_leader_is_not_ready_until_its_caches_are_synced() -> None:
    api, clock = MemoryApi(), ManualClock()
    c = coordinator(api, clock)
    assert c.elector.try_acquire_or_renew()  # no Lease: created, we lead
    c.elector.leading.set()  # as run() does before starting the caches
    assert c.readiness() == Verdict(False, "leading, caches not synced yet: all")


@pytest.fixture
def served() -> Iterator[tuple[str, dict[str, Verdict]]]:
    """The HTTP server with probes answering whatever the test puts in `verdicts`."""
    verdicts = {"live": Verdict(True, "turning: lease"), "ready": Verdict(True, "standby")}
    registry = CollectorRegistry()
    RolloutMetrics(registry).record("gpu", {"counts": {"Done": 2}}, {}, {}, [])
    checks = HealthChecks(lambda: verdicts["live"], lambda: verdicts["ready"])
    server, thread = serve_metrics("127.0.0.1", 0, registry, checks)
    try:
        yield f"http://127.0.0.1:{server.server_port}", verdicts
    finally:
        stop_metrics(server)
        thread.join(timeout=5)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - http to loopback
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_probes_answer_200_or_503_with_the_reason(
    served: tuple[str, dict[str, Verdict]],
) -> None:
    base, verdicts = served
    assert get(f"{base}/healthz") == (200, "ok: turning: lease\n")
    assert get(f"{base}/readyz") == (200, "ok: standby\n")
    verdicts["live"] = Verdict(False, "wedged: lease (3s overdue)")
    verdicts["ready"] = Verdict(False, "leading, caches not synced yet: nodes")
    assert get(f"{base}/healthz") == (503, "failed: wedged: lease (3s overdue)\n")
    assert get(f"{base}/readyz") == (503, "failed: leading, caches not synced yet: nodes\n")
    status, text = get(f"{base}/metrics")
    assert status == 200
    assert 'gpuctl_rollout_nodes{gpudriver="gpu",phase="Done"} 2.0' in text


def test_a_check_that_raises_fails_the_probe() -> None:
    def broken() -> Verdict:
        raise RuntimeError("no elector")

    checks = HealthChecks(broken, broken)
    server, thread = serve_metrics("127.0.0.1", 0, CollectorRegistry(), checks)
    try:
        status, text = get(f"http://127.0.0.1:{server.server_port}/readyz")
    finally:
        stop_metrics(server)
        thread.join(timeout=5)
    assert (status, text) == (503, "failed: check failed: RuntimeError: no elector\n")


def test_the_agents_event_loop_beats_while_it_serves_and_rests_when_stopped() -> None:
    clock = ManualClock()
    liveness = Liveness(clock)
    server = AgentServer(
        MemoryApi(),
        ServerConfig(
            agents=AgentServiceConfig(audience="a", agent_username="u"),
            host="127.0.0.1",
            port=0,
            insecure=True,
        ),
        Registry(clock, clock.wall),
        heartbeat=Heartbeat(liveness, "grpc-event-loop", 30),
        monotonic=clock,
        wall_clock=clock.wall,
        epoch_clock=clock,
    )
    server.start()
    turning = Verdict(True, "turning: grpc-event-loop")
    try:
        wait_until("the event loop beats", lambda: liveness.verdict() == turning)
        # 31 s of the liveness clock with no beat is overdue; the loop beats again within a
        # second of real time and is alive again.
        clock.advance(31)
        wait_until("the event loop beats again", lambda: liveness.verdict() == turning)
    finally:
        server.stop()
    assert liveness.verdict() == Verdict(True, "turning: no loop running")
