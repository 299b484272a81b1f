"""The rollout's rules, pure and shared: the coordinator decides by them and `gpuctl rollout
plan` shows them (gates, start order, holds)."""
