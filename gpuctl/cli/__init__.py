"""The gpuctl command line."""
