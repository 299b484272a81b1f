"""Live node reports: the agents' gRPC streams, their identities, and what they tell us.

The coordinator serves AgentService (one stream per node) and NodeService (the direct read
API) on one grpc.aio server running its event loop in its own thread (server.py), assembled
with the rest in live.py. By concern:

- streams/: the sessions and the services over them; facts cross into the rest of the
  coordinator through a thread-safe registry (coordinator/live_nodes/streams/registry.py);
- gpunodes/: the GPUNode mirror (coordinator/live_nodes/gpunodes/mirror.py,
  coordinator/live_nodes/gpunodes/gpunode_status.py) writes them into the API (the GPUNode CRD is
  gpuctl/crds/gpunode.py);
- tls/: the server's certificate, managed or mounted and re-read;
- access/: who an agent speaks for and who may read (identity, TokenReview,
  SubjectAccessReview, the Nodes this coordinator serves).

The rollout (coordinator/rollout) asks the agents through the server for fresh reports.
"""
