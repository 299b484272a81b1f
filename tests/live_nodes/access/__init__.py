"""Tests of coordinator/live_nodes/access."""
