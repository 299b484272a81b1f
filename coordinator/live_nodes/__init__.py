"""Live node reports: the agents' gRPC streams, their identities, and what they tell us.

The coordinator serves AgentService (one stream per node) and NodeService (the direct read
API) on one grpc.aio server running its event loop in its own thread (server.py). Facts cross
into the rest of the coordinator through a thread-safe registry (streams/registry.py): the GPUNode
mirror (gpunodes/mirror.py, gpunodes/gpunode_status.py) writes them into the API, and the rollout
(coordinator/rollout) asks the agents through the server for fresh reports.
"""
