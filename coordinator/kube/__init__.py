"""Kubernetes plumbing of the coordinator: the API client, watch caches, leader election, Events,
API discovery. Knows nothing about GPUDrivers."""
