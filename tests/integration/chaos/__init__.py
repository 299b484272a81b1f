"""Chaos: the coordinator against a control plane the tests stop, pause and restart."""
