"""KMM's own operator for a bench's namespace, and a fake Arc B580 host under each node it serves.

The benches run the KMM the tests run (testbed/harness/real_kmm.py, built from source by
`hack/kmm/ensure`, `$GPUCTL_KMM` naming a build): its manager creates the pull and worker Pods,
and the kubelet of testbed/harness/kubelet runs KMM's `worker` binary against each node's fake
host root, so a bench's load and unload cost what KMM's own Pods cost. `host` makes a node's
root (one Arc B580 on the in-tree xe: a first load replaces it) and serves it; `publish`
puts an image holding xe at a version in the catalogue, for the hosts' kernel.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from testbed.fakehost.host import DEFAULT_RELEASE
from testbed.fakehost.scenarios import arc_b580_in_tree
from testbed.harness.cluster import repository_root
from testbed.harness.kmm_build import find_kmm
from testbed.harness.real_kmm import RealKmm
from testbed.rollout_live.fake_nodes import srcversion_of

KERNEL = DEFAULT_RELEASE  # every fake host's kernel, and so every bench Node's


class KmmFleet:
    def __init__(self, admin_client: Any, kubeconfig: Path, namespace: str, folder: Path) -> None:
        self._hosts = folder / "hosts"
        self.kmm = RealKmm(
            find_kmm(repository_root(), os.environ),
            admin_client,
            kubeconfig,
            namespace,
            folder / "kmm",
        )

    def __enter__(self) -> KmmFleet:
        self.kmm.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kmm.__exit__(*exc)

    def host(self, node: str) -> None:
        """`node`'s fake host, served to KMM's kubelet."""
        host = arc_b580_in_tree(self._hosts / node)
        assert host.kernel_release == KERNEL, host.kernel_release
        self.kmm.serve(node, host.root, KERNEL)

    def publish(self, image: str, version: str) -> None:
        """`image` holds xe at `version` (its backport tag) for the hosts' kernel; a
        template's `$KERNEL_FULL_VERSION` is that kernel, as KMM fills it in."""
        self.kmm.catalogue.add_xe_image(
            image.replace("$KERNEL_FULL_VERSION", KERNEL),
            [KERNEL],
            version=f"xeb_{version}",
            srcversion=srcversion_of(version),
        )
