"""Tests of the rollout's place stage (gpuctl/rollout/place)."""
