"""How the rollout controller runs: its namespace, agent deadlines, parallelism, worker hold,
and how it reaches gates' Prometheus servers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class PrometheusAccess:
    """How the coordinator authenticates to gates' Prometheus servers (prometheus_query.py):
    files read at every query; None: no token, the system's CAs."""

    token_file: Path | None = None
    ca_file: Path | None = None


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
