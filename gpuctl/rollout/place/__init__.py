"""The rollout pipeline's second stage: each node's place in the rollout before its step
(placement.py), and the steps a refused rollout still finishes (refused.py)."""
