"""gpuctl agent: reads the truth about one node's Intel GPUs and xe module under a host root."""
