"""The Prometheus gate end to end: the coordinator (a real process) asks a real Prometheus
server (Debian's, testbed/harness/prometheus.py), which scrapes an endpoint the test serves and
fires an alert from a rule file; real agents, the real API server and real KMM. A
query that cannot be evaluated holds the rollout and says why; a firing alert holds it;
clearing the alert releases it; a node starts only on an answer asked for that start.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.common import names
from testbed.harness.prometheus import (
    FIRING_QUERY,
    MetricsEndpoint,
    instant_queries,
    query,
    running_prometheus,
)
from testbed.harness.waiting import wait_until
from testbed.rollout_live.images import NEW, OLD
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import (
    FAST,
    held_by,
    module_version,
    start,
    wait_complete,
    wait_status,
)

pytestmark = pytest.mark.integration


def test_a_firing_alert_holds_the_rollout_and_clearing_it_releases_it(
    rollout_rig: RolloutRig, tmp_path: Any
) -> None:
    rig = rollout_rig
    endpoint = MetricsEndpoint()
    endpoint.value = 1  # a GPU node is degraded: the alert fires
    try:
        with running_prometheus(tmp_path / "prometheus", endpoint.port) as url:
            wait_until("the alert fires", lambda: query(url, FIRING_QUERY), timeout_seconds=60)
            gate = {"url": url, "query": "ALERTS{alertstate="}  # not PromQL
            nodes = start(rig, ["a", "b"], {**FAST, "gates": {"prometheus": gate}})
            new = rig.kmm_version_at(NEW)
            rig.set_version(NEW)
            status = wait_status(rig, "held: cannot evaluate", held_by(new, "cannot evaluate"))
            assert "HTTP 400, bad_data" in status["message"]
            rig.patch_driver(
                {"spec": {"rollout": {"gates": {"prometheus": {"query": FIRING_QUERY}}}}}
            )
            status = wait_status(rig, "held by the alert", held_by(new, "returned 1 series"))
            assert 'alertname="GpuDegraded"' in status["message"]
            # Two more asks of the gate (every 2 s), each answered with the alert: nobody starts.
            asked = instant_queries(url)
            wait_until(
                "the gate is asked twice more",
                lambda: instant_queries(url) >= asked + 2,
                timeout_seconds=60,
            )
            # Nobody starts: each waits Done at the old version (no write until its turn).
            assert [rig.state(n) for n in nodes] == [f"Done {rig.kmm_version_at(OLD)}"] * 2
            endpoint.value = 0  # the node recovered: the alert resolves
            rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=120, version=new)
            wait_status(rig, "Complete", lambda s: s.get("state") == "Complete")
        for node in nodes:
            assert module_version(rig, node) == NEW
        assert rig.kernels.violations == []
    finally:
        endpoint.close()


def test_an_alert_that_fires_while_held_keeps_the_next_node_from_starting_on_resume(
    rollout_rig: RolloutRig, tmp_path: Any
) -> None:
    """The coordinator keeps a gate answer for status a little while; a start must not rest
    on it. Held after the first node while the gate passes, the alert fires; the GPUDriver
    is touched all along (each touch a pass that asks the gate or reuses its answer) and
    resumed the moment Prometheus shows the alert: the next node does not start, and the
    status names the alert. Cleared, the rollout completes."""
    rig = rollout_rig
    endpoint = MetricsEndpoint()
    try:
        with running_prometheus(tmp_path / "prometheus", endpoint.port) as url:
            gate = {"url": url, "query": FIRING_QUERY}
            rollout = {**FAST, "holdAfterFirstNode": True, "gates": {"prometheus": gate}}
            first, second = start(rig, ["a", "b"], rollout)
            new = rig.kmm_version_at(NEW)
            rig.set_version(NEW)
            held = wait_status(rig, "held after the first node", held_by(new, "first node"))
            assert held["holdKind"] == "AfterFirstNode"
            endpoint.value = 1  # a GPU node degrades while the admin checks the first one
            touches = 0

            def firing_while_touched() -> bool:
                nonlocal touches
                touches += 1
                rig.patch_driver({"metadata": {"annotations": {"test/touch": str(touches)}}})
                return bool(query(url, FIRING_QUERY))

            wait_until("the alert fires", firing_while_touched, timeout_seconds=60)
            # What `gpuctl rollout resume NAME` writes: the version the status speaks of.
            rig.patch_driver(
                {
                    "metadata": {"annotations": {names.RESUMED_VERSION: held["targetVersion"]}},
                    "spec": {"rollout": {"paused": False}},
                }
            )
            status = wait_status(rig, "held by the alert", held_by(new, "returned 1 series"))
            assert status["holdKind"] == "PrometheusGate"
            assert 'alertname="GpuDegraded"' in status["message"]
            # The pass that wrote this status is the resumed one: had it started the node on
            # an older answer, the node would have started (left Done at the old version) in it.
            assert rig.state(first) == f"Done {new}"
            assert rig.state(second) == f"Done {rig.kmm_version_at(OLD)}"
            endpoint.value = 0
            rig.wait_phases(dict.fromkeys([first, second], "Done"), timeout=120, version=new)
            assert wait_complete(rig)["targetVersion"] == new  # no PrometheusGate hold left
        assert rig.kernels.violations == []
    finally:
        endpoint.close()
