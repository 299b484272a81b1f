"""Integration tests of the rollout: end to end with the coordinator process, agents and the
real KMM (testbed/harness/real_kmm.py), and the CRD's rollout schema on the real API server."""
