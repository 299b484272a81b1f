"""gpuctl_build_info and gpuctl_leader: what this replica runs and whether it leads, read at
scrape time."""

from __future__ import annotations

import re
import threading

import pytest
from prometheus_client import CollectorRegistry

from coordinator.process_metrics import MEMORY_LIMIT_ENV, CoordinatorCollector, memory_limit_from


def test_build_info_and_leader_follow_the_lease() -> None:
    leading = threading.Event()
    registry = CollectorRegistry()
    registry.register(CoordinatorCollector("1.2.3", leading.is_set))
    labels = {"component": "coordinator", "version": "1.2.3"}
    assert registry.get_sample_value("gpuctl_build_info", labels) == 1
    assert registry.get_sample_value("gpuctl_leader") == 0
    leading.set()
    assert registry.get_sample_value("gpuctl_leader") == 1


def test_the_memory_limit_is_served_only_where_the_chart_passes_it() -> None:
    registry = CollectorRegistry()
    registry.register(CoordinatorCollector("1.2.3", lambda: True, 536870912))
    assert registry.get_sample_value("gpuctl_memory_limit_bytes") == 536870912
    outside_a_pod = CollectorRegistry()
    outside_a_pod.register(CoordinatorCollector("1.2.3", lambda: True))
    assert outside_a_pod.get_sample_value("gpuctl_memory_limit_bytes") is None


def test_the_memory_limit_is_read_from_the_downward_api_variable() -> None:
    assert memory_limit_from({MEMORY_LIMIT_ENV: "536870912"}) == 536870912
    assert memory_limit_from({}) is None
    assert memory_limit_from({MEMORY_LIMIT_ENV: ""}) is None
    for bad in ("512Mi", "-1", "0", "1.5"):
        with pytest.raises(
            ValueError, match=f"GPUCTL_MEMORY_LIMIT_BYTES must be .* not '{re.escape(bad)}'"
        ):
            memory_limit_from({MEMORY_LIMIT_ENV: bad})
