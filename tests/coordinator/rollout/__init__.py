"""Tests of the coordinator's rollout engine (coordinator/rollout)."""
