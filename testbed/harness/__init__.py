"""A real Kubernetes control plane for tests and local runs, with KMM's own operator beside it.

etcd, kube-apiserver and kube-controller-manager, built from the upstream Go modules by
``hack/kube/ensure``, run as local processes on loopback (see ``cluster.py``). Kernel Module
Management is KMM itself, built from its source by ``hack/kmm/ensure`` (``kmm_build.py``): its
manager (``kmm_operator.py``) and webhook server (``kmm_webhook.py``), and a kubelet for its
Pods over each simulated node's fake host root (``kubelet/``), put together in
``real_kmm.py``. The tests, the demo and the benchmarks all run it.
"""
