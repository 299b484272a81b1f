"""What KMM's own manager did during a stretch of a bench: its reconciles per controller, how long
a node's change waited in each controller's queue and how long a reconcile took, and the CPU
seconds it used, read from its metrics endpoint (controller-runtime's
`controller_runtime_reconcile_total`, client-go's `workqueue_queue_duration_seconds` and
`workqueue_work_duration_seconds` histograms by controller, the process collector's
`process_cpu_seconds_total`).

A gpuctl rollout and the floor (the same upgrade by KMM's docs) load KMM differently: KMM's
Module controller reconciles the whole Module whenever any label or taint of a node changes, and
gpuctl writes a node's state label at each step and cordons it, where the floor writes one
version label. Reading KMM's own counters in both runs says how much of the difference in KMM's
time per node is KMM doing more work, and whether its changes wait in a queue (each of KMM's
controllers reconciles one object at a time) or in slower reconciles, rather than guessing it.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

RECONCILES = "controller_runtime_reconcile"
CPU = "process_cpu_seconds"
QUEUED = "workqueue_queue_duration_seconds"  # an item added -> a worker takes it
WORKED = "workqueue_work_duration_seconds"  # a worker takes it -> done


@dataclass(frozen=True)
class Durations:
    """A histogram's sum and count by controller name (cumulative, or a difference)."""

    seconds: Mapping[str, float] = field(default_factory=dict)
    count: Mapping[str, float] = field(default_factory=dict)

    def mean(self, name: str) -> float | None:
        count = self.count.get(name, 0.0)
        return self.seconds.get(name, 0.0) / count if count > 0 else None

    def since(self, before: Durations) -> Durations:
        return Durations(_minus(self.seconds, before.seconds), _minus(self.count, before.count))


def _minus(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    return {name: value - before.get(name, 0.0) for name, value in after.items()}


@dataclass(frozen=True)
class KmmWork:
    """Reconciles by controller name, the controllers' queue waits and reconcile durations, and
    CPU seconds (cumulative, or a difference)."""

    reconciles: Mapping[str, float] = field(default_factory=dict)
    cpu_seconds: float = 0.0
    queued: Durations = field(default_factory=Durations)
    worked: Durations = field(default_factory=Durations)

    def since(self, before: KmmWork) -> KmmWork:
        return KmmWork(
            _minus(self.reconciles, before.reconciles),
            self.cpu_seconds - before.cpu_seconds,
            self.queued.since(before.queued),
            self.worked.since(before.worked),
        )


def parse_kmm_work(text: str) -> KmmWork:
    """KmmWork from one scrape of KMM's manager (Prometheus text)."""
    reconciles: dict[str, float] = {}
    cpu = 0.0
    histograms: dict[str, dict[str, float]] = {
        f"{metric}_{part}": {} for metric in (QUEUED, WORKED) for part in ("sum", "count")
    }
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{RECONCILES}_total":
                name = sample.labels.get("controller", "")
                reconciles[name] = reconciles.get(name, 0.0) + sample.value
            elif sample.name == f"{CPU}_total":
                cpu = sample.value
            elif sample.name in histograms:
                name = sample.labels.get("controller") or sample.labels.get("name", "")
                histograms[sample.name][name] = sample.value

    def durations(metric: str) -> Durations:
        return Durations(histograms[f"{metric}_sum"], histograms[f"{metric}_count"])

    return KmmWork(reconciles, cpu, durations(QUEUED), durations(WORKED))


def kmm_work(metrics_port: int) -> KmmWork:
    """One scrape of the KMM manager serving metrics on loopback `metrics_port`."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as answer:
        return parse_kmm_work(answer.read().decode())
