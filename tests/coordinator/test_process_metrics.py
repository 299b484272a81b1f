"""gpuctl_build_info and gpuctl_leader: what this replica runs and whether it leads, read at
scrape time."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry

from coordinator.process_metrics import CoordinatorCollector


def test_build_info_and_leader_follow_the_lease() -> None:
    leading = threading.Event()
    registry = CollectorRegistry()
    registry.register(CoordinatorCollector("1.2.3", leading.is_set))
    labels = {"component": "coordinator", "version": "1.2.3"}
    assert registry.get_sample_value("gpuctl_build_info", labels) == 1
    assert registry.get_sample_value("gpuctl_leader") == 0
    leading.set()
    assert registry.get_sample_value("gpuctl_leader") == 1
