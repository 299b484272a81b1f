"""Fixtures for tests against a real Kubernetes control plane (``testbed/harness``).

- ``kube_cluster`` (session): a ``testbed.harness.access.KubeCluster`` for one etcd +
  kube-apiserver + kube-controller-manager on loopback, with KMM's Module CRD and the
  project's CRDs served. It has ``kubeconfig`` (admin kubeconfig path), ``server``,
  ``ca_cert`` (CA path), and makes ``kubernetes.client.ApiClient`` objects:
  ``admin_client()``, ``user_client(user, groups=())`` (client certificate; RBAC applies),
  ``token_client(token)``, ``service_account_client(namespace, name)``, and mints tokens with
  ``service_account_token(namespace, name, audiences=(), bound_pod=None, expiration_seconds=3600)``.
  Binaries come from ``KUBEBUILDER_ASSETS`` or ``hack/kube/ensure`` (builds when missing); if
  neither works the fixture fails with the reason, it never skips.
- ``kube_admin`` (per test): an admin ``ApiClient``, closed after the test.
- ``namespace`` (per test): a fresh namespace name (its ``default`` ServiceAccount exists);
  deleted after the test.
- ``make_node`` (per test): ``make_node(name, labels=None, kernel_version=...) -> V1Node``
  creates a Ready Node named ``<namespace>-<name>``; deleted after the test. Nodes are
  cluster-wide, so use this rather than fixed names.
- ``api`` (per test): a ``testbed.cluster_api.Api`` (plain-dict admin access for the
  coordinator and CLI tests); the test's GPUDrivers are removed afterwards.
- ``reader_token`` (per test): a token of a ServiceAccount allowed to get/list gpunodes.
- ``tls`` (per module): a CA and serving certificate for a coordinator's gRPC server
  (``testbed.cluster_agents.ServingTls``).
- ``agents`` (per test): ``AgentPods``, Pods bound to the test's Nodes whose tokens the agents
  present; deleted after the test.
- ``live`` (per test): the coordinator's live-node server (``LiveNodes``) for the test's
  namespace, on loopback with ``tls``.
- ``kmm_version`` and ``kmm_build`` (per test): KMM's own operator built from source
  (``testbed.harness.kmm_build``), v2.6.0 unless the test is marked
  ``tests.support.kmm_matrix.EACH_KMM``.
- ``shared_kmm`` (per test, one per control plane): ``testbed.harness.shared_kmm.SharedKmm``,
  the one KMM manager and webhook the tests on a control plane share, stopped with it (one
  version at a time: the tests are ordered so that those at KMM main run after the rest of
  their package).
- ``real_kmm`` (per test): a running ``testbed.harness.real_kmm.RealKmm`` for the test's
  namespace: the shared KMM serving it (or, for a test marked ``own_kmm`` - it kills, stops
  or reconfigures KMM - a manager and webhook of its own, the shared ones stopped first), a
  kubelet for its Pods on the nodes the test ``serve``s, an image catalogue and the
  kernel-boundary record; stopped after the test. A test marked ``own_kmm`` that makes its
  ``RealKmm`` itself gets the shared one stopped too, and so does every test that asks for no
  KMM (none runs while it does).
- ``gpu_nodes`` (per test): ``tests.support.gpu_nodes.GpuNodes`` on ``real_kmm``: Nodes whose
  fake GPU hosts KMM's worker loads and unloads, the drivers tests' images pushed for them.
- ``rollout_rig`` (per test, opt-in): a ``testbed.rollout_live.rig.RolloutRig`` for rollout
  tests: the coordinator as a real process (TLS gRPC, metrics), agents, real KMM (``real_kmm``)
  whose worker changes the nodes' fake roots, and the test's GPUDriver; torn down after.
- ``cordon_taints`` (per test, opt-in): a running ``testbed.harness.cordon_taint.CordonTaintMirror``
  that taints cordoned Nodes ``node.kubernetes.io/unschedulable:NoSchedule`` as a real
  cluster's node-lifecycle controller does (KMM then un-targets them unless tolerated).

Mark tests that use these with ``@pytest.mark.integration``.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from coordinator.kube.client import Kube
from coordinator.live_nodes.live import LiveNodes
from gpuctl.common import names
from testbed.cluster_agents import AgentPods, running_live_nodes
from testbed.cluster_api import Api, remove_test_drivers
from testbed.fixture_types import MakeNode
from testbed.harness.access import KubeCluster
from testbed.harness.cluster import repository_root
from testbed.harness.cordon_taint import CordonTaintMirror
from testbed.harness.kmm_build import DEFAULT_VERSION, MAIN_VERSION, KmmBuild, find_kmm
from testbed.harness.kubelet.pod_status import TEST_BACKOFF
from testbed.harness.namespaces import delete_test_namespace
from testbed.harness.nodes import DEFAULT_KERNEL, create_node
from testbed.harness.real_kmm import RealKmm
from testbed.harness.serving_tls import ServingTls, serving_tls
from testbed.harness.shared_kmm import SharedKmm, for_cluster, stop_all
from testbed.harness.waiting import wait_until
from testbed.rollout_live.rig import RolloutRig
from tests.support.gpu_nodes import GpuNodes
from tests.support.own_cluster import own_cluster


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeCluster]:
    with own_cluster("gpuctl-test-cluster-") as (_, cluster):
        yield cluster


@pytest.fixture
def kube_admin(kube_cluster: KubeCluster) -> Iterator[Any]:
    with kube_cluster.admin_client() as api_client:
        yield api_client


@pytest.fixture
def namespace(kube_admin: Any) -> Iterator[str]:
    core: Any = k8s.CoreV1Api(kube_admin)
    created = core.create_namespace({"metadata": {"generateName": "t-"}})
    name: str = created.metadata.name

    def default_service_account_exists() -> bool:
        accounts = core.list_namespaced_service_account(name).items
        return any(account.metadata.name == "default" for account in accounts)

    wait_until(f"namespace {name} has its default ServiceAccount", default_service_account_exists)
    yield name
    delete_test_namespace(core, name)


@pytest.fixture
def make_node(kube_admin: Any, namespace: str) -> Iterator[MakeNode]:
    created: list[str] = []

    def make(
        name: str,
        labels: Mapping[str, str] | None = None,
        kernel_version: str = DEFAULT_KERNEL,
    ) -> Any:
        full_name = f"{namespace}-{name}"
        node = create_node(kube_admin, full_name, labels or {}, _utc_now(), kernel_version)
        created.append(full_name)
        return node

    yield make
    core: Any = k8s.CoreV1Api(kube_admin)
    for name in created:
        try:
            core.delete_node(name)
        except k8s.ApiException as error:
            if error.status != 404:  # a test may delete its Node itself
                raise


@pytest.fixture
def kmm_version() -> str:
    """The KMM version a test runs against: v2.6.0, unless the test is marked
    ``tests.support.kmm_matrix.EACH_KMM``."""
    return DEFAULT_VERSION


@pytest.fixture
def kmm_build(kmm_version: str) -> KmmBuild:
    return find_kmm(repository_root(), os.environ, kmm_version)


OWN_KMM = "own_kmm"
KMM_FIXTURES = frozenset({"real_kmm", "shared_kmm"})  # rollout_rig and gpu_nodes ask real_kmm


def _owns_kmm(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker(OWN_KMM) is not None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Within each package, the modules that run no KMM first, then the tests at KMM's pinned
    release, those at KMM main, and those with KMM of their own: the shared KMM (one version at
    a time, stopped while a test asks for none) starts a few times per package, not per test.
    Stable, so a module's tests keep their order."""
    first_seen: dict[Path, int] = {}
    modules_with_kmm = {
        item.path for item in items if KMM_FIXTURES & set(getattr(item, "fixturenames", ()))
    }

    def key(item: pytest.Item) -> tuple[int, int, int, int]:
        package = item.path.parent
        rank = first_seen.setdefault(package, len(first_seen))
        callspec = getattr(item, "callspec", None)
        at_main = callspec is not None and MAIN_VERSION in callspec.params.values()
        own = item.get_closest_marker(OWN_KMM) is not None
        return rank, int(item.path in modules_with_kmm), int(at_main), int(own)

    items.sort(key=key)


@pytest.fixture
def shared_kmm(kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> SharedKmm:
    """The shared KMM of the test's control plane, whichever fixture started that (its own
    stops with it: tests/support/own_cluster.py)."""
    return for_cluster(kube_cluster, lambda: tmp_path_factory.mktemp("kmm"))


@pytest.fixture(autouse=True)
def _kmm_only_where_asked(request: pytest.FixtureRequest) -> None:
    """No shared KMM runs during a test that asked for none, or that runs its own (marked
    ``own_kmm``): as before KMM was shared, a test that writes KMM's objects by hand, or
    asserts that nobody touched them, sees no KMM act."""
    if _owns_kmm(request) or not KMM_FIXTURES & set(request.fixturenames):
        stop_all()


@pytest.fixture
def real_kmm(
    request: pytest.FixtureRequest,
    kube_cluster: KubeCluster,
    namespace: str,
    kmm_build: KmmBuild,
    tmp_path: Path,
) -> Iterator[RealKmm]:
    shared = None if _owns_kmm(request) else request.getfixturevalue("shared_kmm")
    with kube_cluster.admin_client() as api_client:
        kmm = RealKmm(
            kmm_build,
            api_client,
            kube_cluster.kubeconfig,
            namespace,
            tmp_path / "kmm",
            backoff=TEST_BACKOFF,
            shared=shared,
        )
        try:
            kmm.start()
            yield kmm
        finally:
            kmm.close()


@pytest.fixture
def gpu_nodes(real_kmm: RealKmm, make_node: MakeNode, tmp_path: Path) -> GpuNodes:
    return GpuNodes(real_kmm, make_node, tmp_path / "hosts")


@pytest.fixture
def cordon_taints(kube_cluster: KubeCluster) -> Iterator[CordonTaintMirror]:
    with kube_cluster.admin_client() as api_client, CordonTaintMirror(api_client) as mirror:
        yield mirror


@pytest.fixture
def rollout_rig(
    *,
    kube_cluster: KubeCluster,
    namespace: str,
    kube_admin: Any,
    real_kmm: RealKmm,
    make_node: MakeNode,
    tmp_path: Path,
) -> Iterator[RolloutRig]:
    folder = tmp_path / "rollout"
    folder.mkdir()
    rig = RolloutRig(
        cluster=kube_cluster,
        namespace=namespace,
        kube=Kube(kube_admin),
        admin=kube_admin,
        kmm=real_kmm,
        tls=serving_tls(folder / "grpc-tls"),
        make_node=make_node,
        folder=folder,
    )
    try:
        yield rig
    finally:
        rig.close()


@pytest.fixture
def api(kube_cluster: KubeCluster, namespace: str) -> Iterator[Api]:
    client = Api(kube_cluster)
    yield client
    remove_test_drivers(client, namespace)
    client.close()


@pytest.fixture
def reader_token(kube_cluster: KubeCluster, namespace: str, kube_admin: Any) -> Iterator[str]:
    """A token of ServiceAccount `reader`, which a ClusterRole lets get/list gpunodes (the
    namespace also gets a ServiceAccount `nobody`, which nothing grants)."""
    core: Any = k8s.CoreV1Api(kube_admin)
    rbac: Any = k8s.RbacAuthorizationV1Api(kube_admin)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
    name = f"{namespace}-gpunode-reader"
    rbac.create_cluster_role(
        {
            "metadata": {"name": name},
            "rules": [
                {
                    "apiGroups": [names.GROUP],
                    "resources": [names.GPUNODE_PLURAL],
                    "verbs": ["get", "list"],
                }
            ],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        }
    )
    try:
        yield kube_cluster.service_account_token(namespace, "reader")
    finally:
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> ServingTls:
    return serving_tls(Path(tmp_path_factory.mktemp("grpc-tls")))


@pytest.fixture
def agents(kube_cluster: KubeCluster, namespace: str, kube_admin: Any) -> Iterator[AgentPods]:
    pods = AgentPods(kube_cluster, namespace, kube_admin)
    yield pods
    pods.delete_pods()


@pytest.fixture
def live(kube_cluster: KubeCluster, namespace: str, tls: ServingTls) -> Iterator[LiveNodes]:
    with running_live_nodes(kube_cluster, namespace, tls) as running:
        yield running
