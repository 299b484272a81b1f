"""The rollout pipeline's fifth stage: who starts within maxUnavailable (starts.py), in
the shared order (order.py)."""
