"""The rollout engine: moves every node a GPUDriver wants to its Module's version, and takes
the driver off every node it no longer wants, one verified node at a time, never unloading
the driver on a busy node. Only the rollout writes the node label the Module selects
(names.TARGET_LABEL), so KMM acts on a node only after this engine decided, on fresh facts,
that it may.

The decision is pure (gpuctl/rollout/decide.py over plain facts, through the rollout's
stages: each node's place, its phase's step, what holds the fleet, who starts, the report);
the I/O layer (controller.py) gathers the facts (nodes, pods, claims, agent answers), carries
out the actions (node patches, evictions, agent requests) and looks again. All state a
restart needs lives on the Node objects (its labels and annotations are named in
gpuctl/common/names.py), so a coordinator killed at any point resumes where it was.
"""
