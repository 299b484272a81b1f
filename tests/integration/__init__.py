"""Integration tests against a real local control plane (fixtures in conftest.py)."""
