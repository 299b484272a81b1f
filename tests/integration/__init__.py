"""Integration tests against a real local control plane, by subject.

``drivers/`` (the GPUDriver controller), ``live_nodes/`` (agents' streams and GPUNodes),
``rollout/``, ``cli/`` and ``harness/`` (the control plane and real KMM themselves). The
fixtures, shared by all of them, are in conftest.py; what they build is in tests/support.
"""
