"""Tests of coordinator/live_nodes/streams."""
