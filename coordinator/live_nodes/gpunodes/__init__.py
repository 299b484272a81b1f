"""The GPUNode mirror: each node's record written into its GPUNode (mirror.py) as the
status gpunode_status.py computes, on deadlines (deadlines.py)."""
