"""A kubelet for KMM's own Pods on simulated nodes: the only stand-in left under real KMM.

Real KMM (its manager, built from source by ``hack/kmm/ensure``) schedules three kinds of
Pods: image pull Pods (does the Module's image exist?), sign Pods (kaniko signing a Module's
unsigned image with ``sign-file``) and worker Pods (load or unload a kernel module on one
node). A test cluster has no kubelet, no kaniko and no kernel for them, so this package plays
them, and nothing of KMM:

- ``catalogue`` - the registry: a folder per module image; a reference without one is missing.
- ``kernel`` - what the kernel does to a node's fake host root (testbed/fakehost) when kmod asks:
  load a module from its file (sysfs entries, functions bound), remove a live one (refused
  while in use, as ``delete_module`` refuses it); ``signature_check`` - whether it accepts the
  module's signature (sig_enforce, lockdown, enrolled and built-in keys).
- ``sign_dockerfile`` and ``sign_pod`` - the Dockerfile KMM writes for a sign Pod, read
  strictly, and kaniko's build of it with ``sign-file``, the signed image pushed to the
  catalogue.
- ``modprobe`` - the ``modprobe`` KMM's real ``worker`` binary runs inside the worker Pod: kmod's
  arguments, exit statuses and words, over ``kernel``; it writes every unload attempt to the
  node's record (``record``) with whether the node was busy at that moment: the oracle.
- ``containers`` - runs a Pod's init container (KMM's own copy command, with the image's files)
  and the worker container (KMM's ``worker`` binary) in a mount namespace whose ``/tmp``,
  ``/lib/modules``, ``/etc/kmm-worker`` and firmware paths are the Pod's and the node's.
- ``pod_status`` - the status a kubelet writes (container states, exit codes, restarts and
  the back-off between them), as pure functions.
- ``kubelet`` - the loop: watches the namespace's Pods, runs each bound to a node it serves;
  ``pod_runners`` - how each kind of Pod runs (pull, sign, worker, gpuctl's image probe);
  ``pod_run`` - one Pod's run (its thread, a worker Pod's containers); ``volumes`` - a Pod's
  volumes and a container's mounts.
"""
