"""Prometheus metrics of live node reports, read at scrape time (nothing in the hot path).

A collector over LiveNodes for a registry passed in (never the global one):

- `gpuctl_agent_sessions`: agent streams open now;
- `gpuctl_agent_nodes{state}`: nodes known to the registry, by `fresh`, `stale` (a report the
  coordinator can no longer vouch for) and `no_report`;
- `gpuctl_agent_reports_total`: reports accepted;
- `gpuctl_agent_reports_dropped_total`: reports dropped by the per-agent rate limit;
- `gpuctl_agent_streams_refused_total{code}`: streams ended by the coordinator, by gRPC status;
- `gpuctl_agent_token_reviews_total`: TokenReviews sent (cache misses);
- `gpuctl_gpunode_writes_total`: GPUNode status writes;
- `gpuctl_agent_versions{version}`: nodes whose agent said it runs that gpuctl version;
- `gpuctl_tls_certificate_expiry_timestamp_seconds{certificate="agent-grpc"}`: when the
  certificate the agents' gRPC server hands out expires (absent while it serves none).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from coordinator.live_nodes.live import LiveNodes
from coordinator.live_nodes.streams.freshness import is_fresh


class LiveNodesCollector(Collector):
    """Register with `registry.register(LiveNodesCollector(live, time.monotonic))`."""

    def __init__(self, live: LiveNodes, monotonic: Callable[[], float]) -> None:
        self._live = live
        self._monotonic = monotonic

    def collect(self) -> Iterator[Metric]:
        live = self._live
        sessions = GaugeMetricFamily("gpuctl_agent_sessions", "Agent streams open now.")
        sessions.add_metric([], live.server.connected_nodes())
        yield sessions

        now, bound = self._monotonic(), live.freshness_seconds
        counts = {"fresh": 0, "stale": 0, "no_report": 0}
        for record in live.registry.records():
            if record.report is None:
                counts["no_report"] += 1
            elif is_fresh(record, now, bound):
                counts["fresh"] += 1
            else:
                counts["stale"] += 1
        nodes = GaugeMetricFamily(
            "gpuctl_agent_nodes",
            "Nodes known from agents, by state of their report.",
            labels=["state"],
        )
        for state, count in counts.items():
            nodes.add_metric([state], count)
        yield nodes

        service = live.server.agent_service
        for name, text, value in (
            ("gpuctl_agent_reports", "Agent reports accepted.", live.registry.reports_accepted),
            (
                "gpuctl_agent_reports_dropped",
                "Agent reports dropped by the per-agent rate limit.",
                service.dropped_reports,
            ),
            (
                "gpuctl_agent_token_reviews",
                "TokenReviews sent for agent and caller tokens (cache misses).",
                live.server.reviewer.reviews_sent,
            ),
            ("gpuctl_gpunode_writes", "GPUNode status writes.", live.mirror.writes),
        ):
            counter = CounterMetricFamily(name, text)
            counter.add_metric([], value)
            yield counter

        refused = CounterMetricFamily(
            "gpuctl_agent_streams_refused",
            "Agent streams the coordinator ended, by gRPC status code.",
            labels=["code"],
        )
        for code, count in sorted(dict(service.refused).items()):
            refused.add_metric([code], count)
        yield refused

        versions = GaugeMetricFamily(
            "gpuctl_agent_versions",
            "Nodes whose agent runs a gpuctl version, by version.",
            labels=["version"],
        )
        by_version: dict[str, int] = {}
        for record in live.registry.records():
            if record.agent_version:
                by_version[record.agent_version] = by_version.get(record.agent_version, 0) + 1
        for version, count in sorted(by_version.items()):
            versions.add_metric([version], count)
        yield versions

        certificate = live.server.certificate
        expiry = GaugeMetricFamily(
            "gpuctl_tls_certificate_expiry_timestamp_seconds",
            "When a certificate the coordinator serves expires, in Unix seconds.",
            labels=["certificate"],
        )
        if certificate is not None:
            expiry.add_metric(["agent-grpc"], certificate.not_after.timestamp())
        yield expiry
