"""Tests of the rollout's fleet stage (gpuctl/rollout/fleet)."""
