"""Metrics of the coordinator process itself, read at scrape time:

- `gpuctl_build_info{component,version}`: 1, labelled with the gpuctl version this replica
  runs (an upgrade half done shows two versions);
- `gpuctl_leader`: 1 while this replica holds the Lease and runs the controllers, else 0
  (sum over replicas: 0 means nobody leads, an alert);
- `gpuctl_memory_limit_bytes`: the container's memory limit, as the chart passes it through
  the Downward API ($GPUCTL_MEMORY_LIMIT_BYTES; absent outside a Pod), so an alert can divide
  `process_resident_memory_bytes` (prometheus_client's ProcessCollector, registered beside
  this) by it before the kernel OOM-kills the leader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class CoordinatorCollector(Collector):
    """Register with `registry.register(CoordinatorCollector(version, is_leading))`."""

    def __init__(
        self, version: str, is_leading: Callable[[], bool], memory_limit_bytes: int | None = None
    ) -> None:
        self._version = version
        self._is_leading = is_leading
        self._memory_limit_bytes = memory_limit_bytes

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
        if self._memory_limit_bytes is not None:
            yield GaugeMetricFamily(
                "gpuctl_memory_limit_bytes",
                "The memory limit of this coordinator's container (the Downward API's "
                "limits.memory: the node's allocatable memory where no limit is set).",
                value=self._memory_limit_bytes,
            )


MEMORY_LIMIT_ENV = "GPUCTL_MEMORY_LIMIT_BYTES"


def memory_limit_from(environ: Mapping[str, str]) -> int | None:
    """The container's memory limit in bytes from the chart's Downward API variable; None
    when unset, and a value that is not a positive whole number is refused."""
    text = environ.get(MEMORY_LIMIT_ENV)
    if text is None or text == "":
        return None
    if not text.isdigit() or int(text) == 0:
        raise ValueError(f"${MEMORY_LIMIT_ENV} must be a positive number of bytes, not {text!r}")
    return int(text)
