"""Metrics of the coordinator process itself, read at scrape time:

- `gpuctl_build_info{component,version}`: 1, labelled with the gpuctl version this replica
  runs (an upgrade half done shows two versions);
- `gpuctl_leader`: 1 while this replica holds the Lease and runs the controllers, else 0
  (sum over replicas: 0 means nobody leads, an alert).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class CoordinatorCollector(Collector):
    """Register with `registry.register(CoordinatorCollector(version, is_leading))`."""

    def __init__(self, version: str, is_leading: Callable[[], bool]) -> None:
        self._version = version
        self._is_leading = is_leading

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "gpuctl_build_info",
            "The gpuctl version a component runs, as a label.",
            labels=["component", "version"],
        )
        info.add_metric(["coordinator", self._version], 1)
        yield info
        leader = GaugeMetricFamily(
            "gpuctl_leader", "1 while this coordinator replica leads, else 0."
        )
        leader.add_metric([], 1 if self._is_leading() else 0)
        yield leader
