"""How the rollout controller runs: its namespace, agent deadlines, parallelism, worker hold,
how it reaches gates' Prometheus servers, and where kured keeps its reboot lock."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuctl.rollout.input.kured_lock import KURED_LOCK_ANNOTATION


@dataclass(frozen=True)
class PrometheusAccess:
    """How the coordinator authenticates to gates' Prometheus servers (prometheus_query.py):
    files read at every query; None: no token, the system's CAs."""

    token_file: Path | None = None
    ca_file: Path | None = None


@dataclass(frozen=True)
class KuredLockConfig:
    """Where kured keeps its reboot lock (kured_lock.py): its DaemonSet, the annotation (its
    --lock-annotation) and its --concurrency (the lock's slots)."""

    namespace: str
    daemon_set: str
    annotation: str = KURED_LOCK_ANNOTATION
    concurrency: int = 1

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.daemon_set}"


@dataclass(frozen=True)
class RolloutConfig:
    namespace: str
    # How often a Blocked node's agent is asked whether its blocker went away.
    blocked_recheck_seconds: float = 30.0
    # Deadlines of report and restore requests (prepare uses spec.rollout.timeouts.prepare).
    report_timeout_seconds: float = 10.0
    restore_timeout_seconds: float = 60.0
    # How many nodes' actions of one pass are carried out at once.
    parallel_nodes: int = 16
    # Hold KMM's worker off a node whose devices were opened after the check (worker_hold.py):
    # only where the chart's worker hold guard enforces it.
    hold_workers: bool = False
    # The bearer token and CA bundle for gates' Prometheus servers (prometheus_query.py).
    prometheus: PrometheusAccess = field(default_factory=PrometheusAccess)
    # kured's reboot lock, held while a node is in a step (kured_lock.py); None: no kured.
    kured: KuredLockConfig | None = None
