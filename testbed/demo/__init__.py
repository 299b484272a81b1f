"""`hack/demo`: the whole system on this machine, narrated (see docs/demo.md).

It reuses the integration tests' parts (testbed/harness, testbed/rollout_live), so the demo
and the tests run the same control plane, KMM operator, coordinator and agents.
"""
