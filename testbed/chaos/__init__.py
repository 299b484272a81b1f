"""Chaos runs: a rollout of many nodes while the control plane, the coordinators, the agents
and a clock are broken on a seeded schedule, with the rollout's invariants checked throughout
(the short run in tests/integration/chaos, the long one in bench/chaos.py)."""
