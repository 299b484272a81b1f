"""Tests of what the three parts share (gpuctl/common)."""
