"""Tests of coordinator/live_nodes/tls."""
