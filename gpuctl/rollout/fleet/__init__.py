"""The rollout pipeline's fourth stage: what holds the whole fleet in one pass
(pass_holds.py): the failure budget and a pause (gates.py), the maintenance windows
(windows.py), the Prometheus gate (prometheus.py), the soak (soak.py), and the
rollback to the previous revision."""
