"""Integration tests of the test harness itself: the local control plane and KMM beside it."""
