"""Tests of the rollout's step stage (gpuctl/rollout/step)."""
