"""A Secure Boot node and an unsigned target: the node is Blocked before anything is unloaded,
saying why, while a node that does not enforce signatures rolls on; once the admin says the
images are signed (rollout.trustImageSignatures, here with a kernel that then accepts the
module), it rolls too. And with KMM signing the target in the cluster: a node that has not
enrolled the key is Blocked before the unload, one that has rolls, its kernel verifying the
signature. On KMM's own operator and worker, real agents over gRPC and TLS reading fake roots
with Secure Boot and lockdown; the fake kernel under KMM's worker checks signatures as a
lockdown kernel does. RolloutRig.close asserts no busy node was unloaded.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from coordinator.kube.client import path
from gpuctl.common import names
from testbed.cluster_api import Api
from testbed.coordinator_rbac import audited_calls, bound_coordinator, token_kubeconfig, username
from testbed.fakehost import FakeHost
from testbed.fakehost.signing import SigningKey, signing_key
from testbed.harness.access import KubeCluster
from testbed.harness.waiting import wait_until
from testbed.rollout_live.images import COMPANION_MODULES, IMAGE_REPOSITORY, NEW, OLD
from testbed.rollout_live.rig import BIN, RolloutRig, stop_process
from testbed.rollout_live.scenario import FAST, module_version, old_root, wait_status

pytestmark = pytest.mark.integration


# Ubuntu's kernel prints its CONFIG_VERSION_SIGNATURE in /proc/version_signature (its
# fs/proc/version_signature.c): "Ubuntu <abi>.<upload>-<flavour> <upstream version>".
UBUNTU_6_8_SIGNATURE = "Ubuntu 6.8.0-60.63-generic 6.8.12\n"


def secure_boot_root(path: Path) -> FakeHost:
    """old_root, booted with Secure Boot: lockdown integrity, sig_enforce N; Ubuntu's kernel
    (it verifies modules with MOK keys, docs/secure-boot.md)."""
    host = old_root(path)
    host.boot_efi(secure_boot=True, shim_validation_disabled=False)
    host.write("proc/version_signature", UBUNTU_6_8_SIGNATURE)
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


# -- KMM signs in the cluster ---------------------------------------------------------------
# The names of the GPUDriver's Secrets (they hold a test key made per run, never a password).
KEY_SECRET = "xe-signing-key"  # noqa: S105
CERT_SECRET = "xe-signing-cert"  # noqa: S105
SIGNED_FILES = [
    f"/opt/lib/modules/${{KERNEL_FULL_VERSION}}/updates/{name}.ko"
    for name in ("xe", *COMPANION_MODULES)
]


def fleet_key() -> SigningKey:
    return signing_key("ACME GPU fleet module signing", 0x1D5E7A)


def enrolled_root(key: SigningKey) -> Callable[[Path], FakeHost]:
    """secure_boot_root with `key` enrolled as its one Machine Owner Key."""

    def make(path: Path) -> FakeHost:
        host = secure_boot_root(path)
        host.boot_efi(secure_boot=True, shim_validation_disabled=False, mok_keys=[key])
        return host

    return make


def create_signing_secrets(rig: RolloutRig, key: SigningKey) -> None:
    """KMM's keySecret and certSecret, in the Module's namespace, under KMM's data keys."""
    for name, data_key, pem in (
        (KEY_SECRET, "key", key.key_pem),
        (CERT_SECRET, "cert", key.certificate_pem),
    ):
        rig.kube.request(
            "POST",
            path("", "v1", "secrets", namespace=rig.namespace),
            body={"metadata": {"name": name}, "data": {data_key: base64.b64encode(pem).decode()}},
        )


def sign_in_the_cluster(rig: RolloutRig, version: str) -> str:
    """The GPUDriver at `version`, its image signed by KMM from an unsigned one (pushed for
    every node's kernel); returns the signed image's reference, a template as fleets write
    it (KMM fills both in per node)."""
    unsigned = f"{IMAGE_REPOSITORY}:{version}-unsigned-$KERNEL_FULL_VERSION"
    signed = f"{IMAGE_REPOSITORY}:{version}-signed-$KERNEL_FULL_VERSION"
    for host in rig.hosts.values():
        pushed = f"{IMAGE_REPOSITORY}:{version}-unsigned-{host.kernel_release}"
        rig.publish(version, host.kernel_release, image=pushed, unsigned=True)
    sign = {
        "keySecret": {"name": KEY_SECRET},
        "certSecret": {"name": CERT_SECRET},
        "filesToSign": SIGNED_FILES,
        "unsignedImage": unsigned,
    }
    mapping = {"regexp": "^.+$", "containerImage": signed, "sign": sign}
    kernel_module = {"version": version, "kernelMappings": [mapping]}
    rig.patch_driver({"spec": {"kernelModule": kernel_module}})
    return signed


def conditions(rig: RolloutRig) -> dict[str, str]:
    """The GPUDriver's conditions by type, as the reconciler wrote them."""
    status = rig.driver().get("status") or {}
    return {c["type"]: c["status"] for c in status.get("conditions") or []}


def gpuctl(rig: RolloutRig, *args: str) -> str:
    """What the real `gpuctl` binary prints, as the admin."""
    return subprocess.run(
        [str(BIN / "gpuctl"), *args, "--kubeconfig", str(rig.cluster.kubeconfig)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout


def plan_row(rig: RolloutRig, node: str) -> str:
    """`gpuctl rollout plan`'s line for `node`."""
    plan = gpuctl(rig, "rollout", "plan")
    rows = [line for line in plan.splitlines() if node in line.split()]
    assert len(rows) == 1, plan
    return rows[0]


def test_kmm_signs_the_target_a_node_trusting_the_key_rolls_one_that_does_not_is_blocked(
    rollout_rig: RolloutRig, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    """Two Secure Boot nodes, one with the fleet key enrolled, one with another key: KMM signs
    the new version in the cluster (its sign Pod, run by the stand-in kubelet as kaniko and
    sign-file would), the coordinator, under the chart's RBAC with the certSecret listed, reads
    the certificate and compares it with each node's MOK list: the stranger is Blocked
    (signing-key) before anything is unloaded, with the key and the fix in its reason, status,
    Events and `gpuctl rollout plan`; the enrolled node rolls and its kernel verifies the
    signed module (taint without E). `gpuctl node inspect` shows the reason beside the node's
    enrolled keys."""
    rig = rollout_rig
    enrolled = rig.add_node("enrolled", enrolled_root(fleet_key()))
    stranger = rig.add_node("stranger", enrolled_root(signing_key("ACME lab key", 0x1AB)))
    create_signing_secrets(rig, fleet_key())
    with bound_coordinator(rig.kube, rig.namespace, signing_certificates=[CERT_SECRET]) as account:
        token = kube_cluster.service_account_token(rig.namespace, account)
        rig.coordinator_kubeconfig = token_kubeconfig(
            tmp_path / "coordinator.kubeconfig", kube_cluster.server, kube_cluster.ca_cert, token
        )
        # OLD was signed out of the cluster with a key both kernels have built in.
        rig.create_driver(OLD, {**FAST, "trustImageSignatures": True})
        rig.start_coordinator()
        for node in (enrolled, stranger):
            rig.start_agent(node)
        rig.wait_phases({enrolled: "Done", stranger: "Done"})
        rig.wait_kmm_loaded([enrolled, stranger])
        rig.kernels.begin()
        rig.patch_driver({"spec": {"rollout": {"trustImageSignatures": False}}})
        signed = sign_in_the_cluster(rig, NEW)
        new = rig.target()
        rig.wait_phases({enrolled: "Done", stranger: "Blocked"}, timeout=180, version=new)

        assert module_version(rig, enrolled) == NEW
        loaded = rig.kmm.loaded(rig.module, enrolled)
        assert loaded is not None
        assert loaded.image == signed.replace(
            "$KERNEL_FULL_VERSION", rig.hosts[enrolled].kernel_release
        )
        taint = rig.hosts[enrolled].real("sys/module/xe/taint").read_text().strip()
        assert "E" not in taint, taint  # the kernel verified KMM's signature
        assert module_version(rig, stranger) == OLD  # never unloaded
        assert rig.kernels.unloads == [enrolled]
        assert rig.annotation(stranger, names.REASON_KIND) == "signing-key"
        key = fleet_key()
        reason = rig.annotation(stranger, names.REASON)
        expected = (
            f"KMM signs the target with '{key.common_name}' (serial {key.key_id}, Secret "
            f"{rig.namespace}/{CERT_SECRET}), which the node does not trust: not among its 1 "
            "enrolled MOK key"
        )
        assert expected in reason, reason
        wait_status(
            rig,
            "names the stranger's kind",
            lambda status: any(
                (n.get("name"), n.get("kind")) == (stranger, "signing-key")
                for n in status.get("nodes") or []
            ),
        )
        assert "which the node does not trust" in plan_row(rig, stranger)
        inspected = gpuctl(rig, "node", "inspect", stranger)
        assert "Rollout of GPUDriver gpu: Blocked (signing-key): " in inspected, inspected
        assert expected in inspected
        assert "enrolled MOK keys: 'ACME lab key'" in inspected  # not the fleet key
        # For GitOps tools: still reconciling (a node waits), not stalled.
        wait_until(
            "Reconciling, naming the wait", lambda: conditions(rig).get("Reconciling") == "True"
        )
        assert conditions(rig)["Stalled"] == "False"
        events = Api(rig.cluster).events_for(rig.driver()["metadata"]["uid"])
        assert any(expected in str(e.get("message")) for e in events), events
        assert rig.coordinator is not None
        stop_process(rig.coordinator)
    reads = [
        c
        for c in audited_calls(kube_cluster.layout.audit_log, username(rig.namespace))
        if c.resource == "secrets"
    ]
    assert {(c.verb, c.code) for c in reads} == {("get", 200)}  # read, and allowed
