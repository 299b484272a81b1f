"""GPU Nodes that real KMM loads and unloads: a Node, its fake host root, served by KMM's
kubelet, with the module images tests name pushed for its kernel.

The GPUDriver controller's tests (tests/integration/drivers/) run no agents: they play the
rollout's label writes themselves and watch what KMM does. `GpuNodes.add` makes a Node whose
host runs one Arc B580 on the in-tree xe; `publish` pushes an image (an xe built at a version)
for every node's kernel, now and for nodes added later. The `gpu_nodes` fixture
(tests/integration/conftest.py) builds one per test on `real_kmm`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from testbed.cluster_api import mapped_image
from testbed.fakehost import FakeHost
from testbed.fakehost.scenarios import arc_b580_in_tree
from testbed.fixture_types import MakeNode
from testbed.harness.kubelet import kernel
from testbed.harness.real_kmm import RealKmm

# The tags the drivers tests' images name (testbed/cluster_api.py mapped_image, simple_spec).
TEST_TAGS = ("1", "1.0", "2.0", "7.0")


class GpuNodes:
    def __init__(self, kmm: RealKmm, make_node: MakeNode, folder: Path) -> None:
        self.kmm = kmm
        self._make_node = make_node
        self._folder = folder
        self.hosts: dict[str, FakeHost] = {}
        self._images: dict[str, str] = {}
        for tag in TEST_TAGS:
            self.publish(mapped_image(tag), f"xeb_{tag}")

    def add(self, short: str, labels: Mapping[str, str]) -> str:
        """A Ready Node `<namespace>-<short>` with `labels`, its GPU host served to KMM."""
        host = arc_b580_in_tree(self._folder / short)
        name: str = self._make_node(
            short, dict(labels), kernel_version=host.kernel_release
        ).metadata.name
        self.hosts[name] = host
        self.kmm.serve(name, host.root, host.kernel_release)
        for image, version in self._images.items():
            self._push(image, version, host.kernel_release)
        return name

    def publish(self, image: str, version: str) -> None:
        """`image` holds xe at `version`, for every node's kernel (later nodes' too); a
        template's `$KERNEL_FULL_VERSION` is each kernel, as the fleet's pipeline pushes it."""
        self._images[image] = version
        for release in {host.kernel_release for host in self.hosts.values()}:
            self._push(image, version, release)

    def _push(self, image: str, version: str, kernel: str) -> None:
        self.kmm.catalogue.add_xe_image(
            image.replace("$KERNEL_FULL_VERSION", kernel),
            [kernel],
            version=version,
            srcversion=version.upper()[:24],
        )

    def unloads_since(self, since: float) -> set[str]:
        """The nodes KMM's worker unloaded since `since` (time.time()): a load's in-tree
        removal before then is setup, not the test's."""
        return {c.node for c in self.kmm.unload_calls() if c.succeeded and c.at >= since}

    def refuse_loads(self, node: str, reason: str | None = "Key was rejected by service") -> None:
        """The node's kernel refuses every module load (`reason`), or no longer (None)."""
        host = self.hosts[node]
        if reason is None:
            host.remove(kernel.REFUSES_LOADS)
        else:
            host.write(kernel.REFUSES_LOADS, reason + "\n")

    def live_version(self, node: str) -> str:
        """The loaded xe's version ("" when none is loaded). Read, not checked first: an
        unload may take the file away between a check and the read."""
        try:
            return self.hosts[node].real("sys/module/xe/version").read_text().strip()
        except FileNotFoundError:
            return ""
