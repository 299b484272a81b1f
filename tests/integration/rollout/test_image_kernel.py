"""A reload whose image KMM says `Exists` but that holds no modules for the node's kernel.

KMM's pull Pod runs the image with `exit 0` (imagepuller.go): a fixed tag under a `^.+$`
mapping, built for another kernel only, `Exists`. Its loader's init container then copies
`/opt/lib/modules/<kernel>` out of it (workerpodmanager.go) and fails for ever, after the
version flip unloaded the old module. So before the flip the coordinator runs that copy in
the image on the node (gpuctl/rollout/input/image_probe.py): here the image lacks the folder, and
the node is Blocked (`image-lacks-kernel`) naming the image and the kernel, still loaded at
the old version, nothing unloaded; once the image is pushed again with this kernel's build
under the same tag, the Blocked node's probe runs again and the node goes to the new version.

Real KMM (testbed/harness/real_kmm.py) under the real coordinator and agent; the test bed's
kubelet runs KMM's Pods and the probe (testbed/harness/kubelet).
"""

from __future__ import annotations

import pytest

from gpuctl.common import names
from testbed.rollout_live.images import IMAGE_REPOSITORY, NEW, OLD
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import FAST, TIMEOUTS, module_version, old_root
from tests.support.kmm_matrix import EACH_KMM

pytestmark = pytest.mark.integration

OTHER_KERNEL = "6.8.0-61-generic"  # the only kernel the fixed tag was built for


@EACH_KMM
def test_a_fixed_tag_built_for_another_kernel_holds_the_reload_until_this_kernels_is_pushed(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    node = rig.add_node("a", old_root)
    kernel = rig.hosts[node].kernel_release
    rig.create_driver(OLD, {**FAST, "timeouts": {**TIMEOUTS, "check": "10s"}})
    rig.start_coordinator()
    rig.start_agent(node)
    rig.wait_phases({node: "Done"})
    rig.wait_kmm_loaded([node])
    rig.kernels.begin()
    fixed = f"{IMAGE_REPOSITORY}:{NEW}-fixed"  # one tag for every kernel, as `^.+$` says
    rig.publish(NEW, OTHER_KERNEL, image=fixed)
    mappings = [{"regexp": "^.+$", "containerImage": fixed}]
    rig.patch_driver({"spec": {"kernelModule": {"version": NEW, "kernelMappings": mappings}}})

    rig.wait_phases({node: "Blocked"}, timeout=60)
    assert rig.annotation(node, names.REASON_KIND) == "image-lacks-kernel"
    reason = rig.annotation(node, names.REASON)
    assert f"image {fixed} lacks /opt/lib/modules/{kernel}" in reason, reason
    assert f"the node's kernel {kernel}" in reason, reason
    assert "No such file or directory" in reason, reason  # cp's own words, from the node
    assert module_version(rig, node) == OLD  # still loaded: nothing was unloaded
    labels = rig.node(node)["metadata"]["labels"]
    assert labels[rig.labels.version] == rig.kmm_version_at(OLD)  # KMM's label not flipped
    assert rig.kernels.unloads.count(node) == 0

    rig.publish(NEW, kernel, image=fixed)  # the same tag, now with this kernel's build
    rig.wait_phases({node: "Done"}, timeout=120)
    assert module_version(rig, node) == NEW
    assert rig.kernels.unloads.count(node) == 1  # the old module, once the new one can load
