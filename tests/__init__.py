"""Tests: unit tests beside integration tests against a real control plane."""
