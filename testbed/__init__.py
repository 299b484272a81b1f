"""The local test bed: a real control plane on loopback (harness), KMM's own operator beside
it with a kubelet for its Pods, fake host roots (fakehost), simulated GPU nodes and the rigs
the tests, `hack/` and `bench/` run on. Nothing in it imports `tests/`."""
