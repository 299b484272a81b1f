"""What the tests share: fakes, sample objects, clients and rigs; no tests live here.

- ``samples``: plain-data GPUDrivers, Modules, Nodes and ResourceClaims.
- ``rollout_samples``: plain-data inputs of the rollout's pure decision.
- ``memory_api``: ``MemoryApi``, the in-memory API server (the one ``KubeApi`` fake).
- ``drivers_world``: the GPUDriver reconciler built over a ``MemoryApi``.
- ``clock``: ``ManualClock``, monotonic seconds and wall time that move when a test says.
- ``agent_client``: a hand-written AgentService client (real gRPC and TLS), sample reports.
- ``cluster_api``: plain-dict access to the test cluster's API server, test GPUDrivers.
- ``cluster_agents``: agents' Pods and bound tokens, and a running LiveNodes, on that cluster.
- ``coordinator_thread``: the coordinator in a thread of the test process, on that cluster.
- ``fixture_types``: the types of the integration fixtures' callables (``MakeNode``).
- ``rollout_live``: the rollout rig (coordinator process, agents, real KMM, fake nodes).

Fixtures stay in the ``conftest.py`` files; what they build comes from here, so no test
imports a conftest. The control plane and KMM beside it are in ``testbed/harness``.
"""
