"""The versions the rollout tests speak of, and the module images and signing key behind them.

Apart from rig.py (which runs the coordinator, agents, KMM and nodes) because tests, the chaos
run and the demo name the versions and images without a rig. Tests speak of the user's
`kernelModule.version` (OLD, NEW).

Images: the GPUDriver maps every kernel to `registry.example.com/xe:<version>` (`image_of`), an
image holding that version's xe for the nodes' kernel; the rig's `set_version` changes version
and image together, as an admin does. Their modules are signed out of the cluster with the
rig's key (`image_signing_key()`), which a node whose fake kernel enforces signatures when it
is added has built in: they load verified there (taint `O`), and unverified (`OE`) on a node
that does not enforce, as any module whose key its kernel lacks
(testbed/harness/kubelet/signature_check.py).
"""

from __future__ import annotations

from testbed.fakehost.signing import SigningKey, signing_key
from testbed.rollout_live.fake_nodes import UNVERSIONED

OLD = "v6.17.13.62_260409.8"
NEW = "v7.1.4.6_260728.7"
IMAGE_REPOSITORY = "registry.example.com/xe"
# What a backport build's image ships beside xe.ko: its compat and DRM helper modules (which a
# GPUDriver's modulesLoadingOrder may name) and GuC firmware.
COMPANION_MODULES = ("xe_compat", "drm_gpuvm")
FIRMWARE = ("bmg_guc_70.bin",)


def image_signing_key() -> SigningKey:
    """The key the rig's images are signed with (made once per process)."""
    return signing_key("gpuctl rollout rig image signing", 0x716)


def image_of(version: str | None) -> str:
    """The kernel mapping's image of a user's version (None: the unversioned build), as fleets
    write it: a template KMM fills in per node with the node's kernel."""
    return f"{IMAGE_REPOSITORY}:{version or UNVERSIONED}-$KERNEL_FULL_VERSION"


def pushed_image(version: str | None, kernel_release: str) -> str:
    """The reference a fleet's image pipeline pushes `version` built for `kernel_release`
    under: image_of(version) as KMM fills it in, spelled out here, not computed by the code
    under test (the rig's kernels are all of KMM's normalized form)."""
    return f"{IMAGE_REPOSITORY}:{version or UNVERSIONED}-{kernel_release}"


def kernel_mappings(version: str | None) -> list[dict[str, str]]:
    return [{"regexp": "^.+$", "containerImage": image_of(version)}]
