"""A real Kubernetes control plane for tests and local runs.

etcd, kube-apiserver and kube-controller-manager, built from the upstream Go modules by
``hack/kube/ensure``, run as local processes on loopback (see ``cluster.py``); a test-side KMM
emulator (``kmm_emulator.py``) plays the part of Kernel Module Management, which needs kernels.
"""
