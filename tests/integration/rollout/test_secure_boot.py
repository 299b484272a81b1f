"""A Secure Boot node and an unsigned target: the node is Blocked before anything is unloaded,
saying why, while a node that does not enforce signatures rolls on; once the admin says the
images are signed (rollout.trustImageSignatures, here with a kernel that then accepts the
module), it rolls too. On KMM's own operator and worker, real agents over gRPC and TLS reading
fake roots with Secure Boot and lockdown; the fake kernel under KMM's worker refuses unsigned
loads as a lockdown kernel does. RolloutRig.close asserts no busy node was unloaded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.common import names
from testbed.fakehost import FakeHost
from testbed.rollout_live.rig import NEW, OLD, RolloutRig
from testbed.rollout_live.scenario import FAST, module_version, old_root

pytestmark = pytest.mark.integration


def secure_boot_root(path: Path) -> FakeHost:
    """old_root, booted with Secure Boot: lockdown integrity, sig_enforce N."""
    host = old_root(path)
    host.boot_efi(secure_boot=True, shim_validation_disabled=False)
    host.set_lockdown("integrity")
    return host


def test_a_secure_boot_node_is_blocked_before_the_unload_while_the_target_is_unsigned(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    locked = rig.add_node("sb", secure_boot_root)
    plain = rig.add_node("plain", old_root)
    rig.create_driver(OLD, {**FAST, "trustImageSignatures": True})  # OLD was signed by hand
    rig.start_coordinator()
    for node in (locked, plain):
        rig.start_agent(node)
    rig.wait_phases({locked: "Done", plain: "Done"})
    rig.wait_kmm_loaded([locked, plain])
    rig.kernels.begin()
    rig.kernels.refuse_loads(locked)  # the new, unsigned build would be refused
    rig.patch_driver({"spec": {"rollout": {"trustImageSignatures": False}}})
    rig.set_version(NEW)
    new = rig.kmm_version_at(NEW)
    rig.wait_phases({locked: "Blocked", plain: "Done"}, timeout=120, version=new)
    assert rig.annotation(locked, names.REASON_KIND) == "unsigned-target"
    reason = rig.annotation(locked, names.REASON)
    assert reason.startswith(
        "the node enforces module signatures (Secure Boot, lockdown integrity) and the target "
    ), reason
    assert module_version(rig, locked) == OLD  # never unloaded
    assert rig.kernels.unloads == [plain]
    # The admin signs the images out of the cluster and says so: the node rolls on.
    rig.kernels.refuse_loads(locked, None)
    rig.patch_driver({"spec": {"rollout": {"trustImageSignatures": True}}})
    rig.wait_phases({locked: "Done", plain: "Done"}, timeout=120, version=new)
    assert module_version(rig, locked) == NEW
