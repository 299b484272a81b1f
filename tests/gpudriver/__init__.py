"""Tests of the GPUDriver's package (gpuctl/gpudriver)."""
