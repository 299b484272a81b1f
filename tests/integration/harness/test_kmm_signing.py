"""KMM's in-cluster signing on KMM's own operator: a Module whose kernel mapping has a `sign`
section gets its unsigned image signed by KMM's sign Pod (run by the test bed's kubelet as
kaniko and sign-file would run it) and the signed image loaded by KMM's worker on a Secure Boot
node whose kernel checks the signature against its enrolled Machine Owner Keys.

Tests of the harness (testbed/harness/kubelet/sign_pod.py, signature_check.py), not of gpuctl:
a hand-written Module, no coordinator. They show that what a rollout test would build on is
real: KMM makes the sign Pod from the Module, its Secrets and its own Dockerfile template; the
signed image is what KMM's worker loads; a key the node has not enrolled is refused by the
kernel with its own words, after KMM's worker has taken the in-tree driver off; a sign that
fails leaves KMM stalled until the Module asks for its images again.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from gpuctl.common.module_signature import SignatureFacts, read_signature
from testbed.fakehost import FakeHost
from testbed.fakehost.scenarios import arc_b580_in_tree
from testbed.fakehost.signing import SigningKey, signing_key
from testbed.fixture_types import MakeNode
from testbed.harness.kubelet import kernel
from testbed.harness.kubelet.catalogue import MODULES_DIR
from testbed.harness.kubelet.record import LOAD, KernelCall
from testbed.harness.real_kmm import KMM_GROUP, KMM_VERSION, RealKmm
from testbed.harness.waiting import wait_until
from tests.support.kmm_matrix import EACH_KMM

pytestmark = pytest.mark.integration

UNSIGNED_IMAGE = "registry.example.com/xe:v7.1.4.6"
SIGNED_IMAGE = "registry.example.com/xe:v7.1.4.6-signed"
VERSION = "backported xeb_v7.1.4.6_260728.7"
SRCVERSION = "A1B2C3D4E5F60718293A4B5"
# The names of the Module's Secrets (they hold a test key made per run, never a password).
KEY_SECRET = "xe-signing-key"  # noqa: S105
CERT_SECRET = "xe-signing-cert"  # noqa: S105
B580 = "0000:03:00.0"
HTTP_CONFLICT = 409
SIGN_POD_SELECTOR = "kmm.node.kubernetes.io/resource-type=SignImage"


def fleet_key() -> SigningKey:
    return signing_key("ACME GPU fleet module signing", 0x1D5E7A)


def other_key() -> SigningKey:
    return signing_key("ACME lab module signing", 0x1AB)


def write_secrets(
    kube_admin: Any, namespace: str, key: SigningKey, certificate: SigningKey
) -> None:
    """The Module's keySecret (``key``'s private key) and certSecret (``certificate``'s), in its
    namespace (KMM's sign Pod mounts them from there), under KMM's data keys."""
    core: Any = k8s.CoreV1Api(kube_admin)
    for name, data_key, pem in (
        (KEY_SECRET, "key", key.key_pem),
        (CERT_SECRET, "cert", certificate.certificate_pem),
    ):
        body = {"metadata": {"name": name}, "data": {data_key: base64.b64encode(pem).decode()}}
        try:
            core.create_namespaced_secret(namespace, body)
        except k8s.ApiException as error:
            if error.status != HTTP_CONFLICT:
                raise
            core.replace_namespaced_secret(name, namespace, body)


@pytest.fixture
def secrets(kube_admin: Any, namespace: str) -> None:
    """The fleet key's Secrets."""
    write_secrets(kube_admin, namespace, fleet_key(), fleet_key())


def signed_module(namespace: str, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": f"{KMM_GROUP}/{KMM_VERSION}",
        "kind": "Module",
        "metadata": {"name": "xe", "namespace": namespace},
        "spec": {
            "selector": selector,
            "moduleLoader": {
                "container": {
                    "modprobe": {"moduleName": "xe"},
                    "inTreeModulesToRemove": ["xe"],
                    "kernelMappings": [
                        {
                            "regexp": "^.+$",
                            "containerImage": SIGNED_IMAGE,
                            "sign": {
                                "unsignedImage": UNSIGNED_IMAGE,
                                "keySecret": {"name": KEY_SECRET},
                                "certSecret": {"name": CERT_SECRET},
                                "filesToSign": [
                                    "/opt/lib/modules/${KERNEL_FULL_VERSION}/updates/xe.ko"
                                ],
                            },
                        }
                    ],
                }
            },
        },
    }


def secure_boot_node(
    make_node: MakeNode, kmm: RealKmm, tmp_path: Path, name: str, enrolled: SigningKey
) -> tuple[str, FakeHost]:
    """A B580 on the in-tree xe, booted with Secure Boot and lockdown integrity (sig_enforce
    N), `enrolled` its one Machine Owner Key."""
    host = arc_b580_in_tree(tmp_path / name)
    host.boot_efi(secure_boot=True, shim_validation_disabled=False, mok_keys=[enrolled])
    host.set_lockdown("integrity")
    node = make_node(name, {"gpu": kmm.namespace}, kernel_version=host.kernel_release)
    kmm.serve(node.metadata.name, host.root, host.kernel_release)
    return node.metadata.name, host


def create_module(kube_admin: Any, body: dict[str, Any]) -> None:
    k8s.CustomObjectsApi(kube_admin).create_namespaced_custom_object(
        KMM_GROUP, KMM_VERSION, body["metadata"]["namespace"], "modules", body
    )


def node_labels(kube_admin: Any, node: str) -> dict[str, str]:
    return dict(k8s.CoreV1Api(kube_admin).read_node(node).metadata.labels or {})  # type: ignore[union-attr]


def xe_file(kmm: RealKmm, image: str, kernel_release: str) -> bytes:
    """The xe.ko of ``image`` in the catalogue."""
    path = kmm.catalogue.folder(image) / MODULES_DIR / kernel_release / "updates/xe.ko"
    return path.read_bytes()


def publish_unsigned(kmm: RealKmm, kernel_release: str) -> None:
    kmm.catalogue.add_xe_image(
        UNSIGNED_IMAGE, [kernel_release], version=VERSION, srcversion=SRCVERSION
    )


@EACH_KMM
def test_kmm_signs_the_image_and_the_node_loads_it_verified(
    real_kmm: RealKmm, make_node: MakeNode, kube_admin: Any, tmp_path: Path, secrets: None
) -> None:
    kmm = real_kmm
    node, host = secure_boot_node(make_node, kmm, tmp_path, "enrolled", fleet_key())
    publish_unsigned(kmm, host.kernel_release)
    create_module(kube_admin, signed_module(kmm.namespace, {"gpu": kmm.namespace}))

    loaded = wait_until("KMM reports xe loaded", lambda: kmm.loaded("xe", node), timeout_seconds=90)
    assert loaded.image == SIGNED_IMAGE
    key = fleet_key()
    signature = read_signature(xe_file(kmm, SIGNED_IMAGE, host.kernel_release))
    assert signature == SignatureFacts(key.common_name, key.key_id, "sha256")
    assert read_signature(xe_file(kmm, UNSIGNED_IMAGE, host.kernel_release)) is None
    assert host.real("sys/module/xe/version").read_text().strip() == VERSION
    assert host.real("sys/module/xe/taint").read_text().strip() == "O"  # verified: no E
    assert kernel.driver_of(host.root, B580) == "xe"
    calls = [(c.action, c.modules, c.succeeded) for c in kmm.kernel_calls()]
    assert calls == [("unload", ("xe",), True), ("load", ("xe",), True)]
    ready = f"kmm.node.kubernetes.io/{kmm.namespace}.xe.ready"
    wait_until(f"KMM labels the node {ready}", lambda: ready in node_labels(kube_admin, node))
    assert kmm.kubelet.errors == []
    kmm.assert_no_unload_while_busy()


def test_a_key_the_node_has_not_enrolled_is_refused_by_its_kernel(
    real_kmm: RealKmm, make_node: MakeNode, kube_admin: Any, tmp_path: Path, secrets: None
) -> None:
    kmm = real_kmm
    node, host = secure_boot_node(make_node, kmm, tmp_path, "stranger", other_key())
    publish_unsigned(kmm, host.kernel_release)
    create_module(kube_admin, signed_module(kmm.namespace, {"gpu": kmm.namespace}))

    def refused() -> list[KernelCall]:
        calls = [c for c in kmm.kernel_calls() if c.action == LOAD and not c.succeeded]
        return calls if len(calls) >= 2 else []

    # The worker Pod's load fails, and fails again when the Pod restarts it.
    first, again = wait_until("the load refused twice", refused, timeout_seconds=90)[:2]
    words = "modprobe: ERROR: could not insert 'xe': Operation not permitted"  # lockdown: EPERM
    assert (first.error, again.error) == (words, words)
    assert (
        read_signature(xe_file(kmm, SIGNED_IMAGE, host.kernel_release)) is not None
    )  # KMM signed it
    # KMM's worker took the in-tree xe off first: the node is left without a GPU driver.
    assert not kernel.is_live(host.root, "xe")
    assert kernel.driver_of(host.root, B580) is None
    assert kmm.status_entry("xe", node) is None
    assert f"kmm.node.kubernetes.io/{kmm.namespace}.xe.ready" not in node_labels(kube_admin, node)
    assert kmm.kubelet.errors == []
    kmm.assert_no_unload_while_busy()


def sign_pods(kube_admin: Any, namespace: str) -> list[dict[str, Any]]:
    core: Any = k8s.CoreV1Api(kube_admin)
    response = core.list_namespaced_pod(
        namespace, label_selector=SIGN_POD_SELECTOR, _preload_content=False
    )
    pods: list[dict[str, Any]] = json.loads(response.data)["items"]
    return pods


def kmm_object(kube_admin: Any, namespace: str, plural: str) -> dict[str, Any]:
    custom: Any = k8s.CustomObjectsApi(kube_admin)
    response = custom.get_namespaced_custom_object(
        KMM_GROUP, KMM_VERSION, namespace, plural, "xe", _preload_content=False
    )
    found: dict[str, Any] = json.loads(response.data)
    return found


def test_a_failed_sign_stalls_kmm_until_the_module_asks_for_new_images(
    real_kmm: RealKmm, make_node: MakeNode, kube_admin: Any, tmp_path: Path
) -> None:
    """A keySecret whose key is not the certSecret's certificate's: sign-file fails, and so
    does the sign Pod (restartPolicy Never). KMM then marks the image DoesNotExist and asks
    its ModuleBuildSignConfig for a *build* the Module does not have (mic_reconciler.go falls
    through from DoesNotExist to NeedsBuilding): its reconciler fails on every pass (a nil
    Build; controller-runtime recovers the panic), nothing more is signed, and the node is
    never touched. Fixing the Secret alone changes nothing KMM watches; bumping the Module's
    imageRebuildTriggerGeneration makes KMM start over, and the image is signed and loaded."""
    kmm = real_kmm
    write_secrets(kube_admin, kmm.namespace, other_key(), fleet_key())
    node, host = secure_boot_node(make_node, kmm, tmp_path, "mismatch", fleet_key())
    publish_unsigned(kmm, host.kernel_release)
    create_module(kube_admin, signed_module(kmm.namespace, {"gpu": kmm.namespace}))

    def failed_sign_pod() -> dict[str, Any] | None:
        failed = [
            p for p in sign_pods(kube_admin, kmm.namespace) if p["status"].get("phase") == "Failed"
        ]
        return failed[0] if failed else None

    pod = wait_until("the sign Pod fails", failed_sign_pod, timeout_seconds=60)
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (state["exitCode"], state.get("message")) == (1, None)  # words in its log, as kaniko's
    assert "sign-file: CMS_add1_signer: key values mismatch" in kmm.kubelet.logs(
        pod["metadata"]["name"]
    )

    def asks_for_a_build() -> bool:
        images = kmm_object(kube_admin, kmm.namespace, "modulebuildsignconfigs")["spec"]["images"]
        return [image["action"] for image in images] == ["BuildImage"]

    wait_until("KMM asks its ModuleBuildSignConfig for a build", asks_for_a_build)
    mic = kmm_object(kube_admin, kmm.namespace, "moduleimagesconfigs")
    assert [s["status"] for s in mic["status"]["imagesStates"]] == ["DoesNotExist"]
    assert not kmm.catalogue.has(SIGNED_IMAGE)
    assert kmm.kernel_calls() == []  # no worker: the in-tree xe is live and untouched
    assert kernel.is_live(host.root, "xe")

    write_secrets(kube_admin, kmm.namespace, fleet_key(), fleet_key())
    k8s.CustomObjectsApi(kube_admin).patch_namespaced_custom_object(
        KMM_GROUP, KMM_VERSION, kmm.namespace, "modules", "xe",
        {"spec": {"imageRebuildTriggerGeneration": 1}},
    )  # fmt: skip
    loaded = wait_until("KMM reports xe loaded", lambda: kmm.loaded("xe", node), timeout_seconds=90)
    assert loaded.image == SIGNED_IMAGE
    assert host.real("sys/module/xe/taint").read_text().strip() == "O"
    assert kmm.kubelet.errors == []
    kmm.assert_no_unload_while_busy()
