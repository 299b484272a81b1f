"""The metric names the coordinator serves, read from a registry wired as coordinator/main.py
wires it (the rollout's metrics, the live nodes' collector, the process collector), so the
chart's alerts and dashboard are checked against what a scrape returns, not against a list.

A name is a family's name, plus `_total` for a counter and `_bucket`, `_sum`, `_count` for a
histogram: the names PromQL selects.
"""

from __future__ import annotations

import datetime
import re
import time

from prometheus_client import CollectorRegistry, ProcessCollector

from coordinator.live_nodes.live import LiveNodes, LiveNodesConfig
from coordinator.live_nodes.metrics import LiveNodesCollector
from coordinator.live_nodes.server import ServerConfig
from coordinator.live_nodes.streams.agent_service import AgentServiceConfig
from coordinator.live_nodes.tls.tls_reload import MemoryCertificate
from coordinator.process_metrics import CoordinatorCollector
from coordinator.rollout.metrics import RolloutMetrics
from testbed.harness import certs
from tests.support.memory_api import MemoryApi

SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
# A metric name in PromQL: what is not a function, keyword, label or variable. Every gpuctl
# metric starts with gpuctl_, the process collector's with process_, which no PromQL function
# or keyword does.
METRIC_NAME = re.compile(r"\b(?:gpuctl|process)_[a-zA-Z0-9_]+")


def served_metric_names() -> set[str]:
    registry = CollectorRegistry()
    RolloutMetrics(registry)
    now = datetime.datetime.now(datetime.UTC)
    live = LiveNodes(
        MemoryApi(),
        LiveNodesConfig(
            ServerConfig(agents=AgentServiceConfig(audience="a", agent_username="u"), insecure=True)
        ),
        monotonic=time.monotonic,
        wall_clock=lambda: now,
        epoch_clock=time.time,
    )
    serving = certs.make_serving_cert(certs.make_ca(now, "metrics-test"), now)
    live.server.certificate = MemoryCertificate(serving.key_pem, serving.cert_pem)
    registry.register(LiveNodesCollector(live, time.monotonic))
    registry.register(CoordinatorCollector("0.0.0-test", lambda: True, 512 * 2**20))
    ProcessCollector(registry=registry)
    names: set[str] = set()
    for family in registry.collect():
        names.add(family.name)
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ()))
    return names


def metric_names_in(promql: str) -> set[str]:
    return set(METRIC_NAME.findall(promql))
