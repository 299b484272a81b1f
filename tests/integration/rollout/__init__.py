"""Integration tests of the rollout: end to end with the coordinator process, agents and the
KMM emulator, and the CRD's rollout schema on the real API server."""
