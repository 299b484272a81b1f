"""Tests of the gpuctl command line."""
