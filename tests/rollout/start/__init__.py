"""Tests of the rollout's start stage (gpuctl/rollout/start)."""
