"""Tests of the rollout's input stage (gpuctl/rollout/input)."""
