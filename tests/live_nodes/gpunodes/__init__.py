"""Tests of coordinator/live_nodes/gpunodes."""
