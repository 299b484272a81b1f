"""The rollout engine: moves every targeted node to `kernelModule.version`, one verified node
at a time, never unloading the driver on a busy node.

The decision is pure (decide.py over plain facts, steps.py per node phase); the I/O layer
(controller.py) gathers the facts (nodes, pods, claims, agent answers), carries out the
actions (node patches, evictions, agent requests) and looks again. All state a restart needs
lives on the Node objects (its labels and annotations are named in gpuctl/common/names.py), so
a coordinator killed at any point resumes where it was.
"""
