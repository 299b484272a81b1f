"""What KMM's own manager did during a stretch of a bench: its reconciles per controller and the
CPU seconds it used, read from its metrics endpoint (controller-runtime's
`controller_runtime_reconcile_total` and the process collector's `process_cpu_seconds_total`).

A gpuctl rollout and the floor (the same upgrade by KMM's docs) load KMM differently: KMM's
Module controller reconciles the whole Module whenever any label or taint of a node changes, and
gpuctl writes a node's state label at each step and cordons it, where the floor writes one
version label. Reading KMM's own counters in both runs says how much of the difference in KMM's
time per node is KMM doing more work, rather than guessing it.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

RECONCILES = "controller_runtime_reconcile"
CPU = "process_cpu_seconds"


@dataclass(frozen=True)
class KmmWork:
    """Reconciles by controller name, and CPU seconds (cumulative, or a difference)."""

    reconciles: Mapping[str, float] = field(default_factory=dict)
    cpu_seconds: float = 0.0

    def since(self, before: KmmWork) -> KmmWork:
        return KmmWork(
            {
                name: count - before.reconciles.get(name, 0.0)
                for name, count in self.reconciles.items()
            },
            self.cpu_seconds - before.cpu_seconds,
        )


def parse_kmm_work(text: str) -> KmmWork:
    """KmmWork from one scrape of KMM's manager (Prometheus text)."""
    reconciles: dict[str, float] = {}
    cpu = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{RECONCILES}_total":
                name = sample.labels.get("controller", "")
                reconciles[name] = reconciles.get(name, 0.0) + sample.value
            elif sample.name == f"{CPU}_total":
                cpu = sample.value
    return KmmWork(reconciles, cpu)


def kmm_work(metrics_port: int) -> KmmWork:
    """One scrape of the KMM manager serving metrics on loopback `metrics_port`."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as answer:
        return parse_kmm_work(answer.read().decode())
