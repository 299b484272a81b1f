"""The rollout pipeline's fourth stage: what holds the whole fleet in one pass
(pass_holds.py: `fleet_holds`): the failure budget and a pause (gates.py), the maintenance
windows and the Prometheus gate (read in gpuctl/rollout/input/), the soak (soak.py), and the
rollback to the previous revision (rollback.py)."""

from __future__ import annotations

from gpuctl.rollout.fleet.pass_holds import fleet_holds
from gpuctl.rollout.fleet.rollback import rollback

__all__ = ["fleet_holds", "rollback"]
