"""Tests of live node reports: the coordinator's gRPC sessions, GPUNode mirror and read API."""
