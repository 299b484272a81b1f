"""The chart installed into the test cluster with real `helm install`, as an admin would, and
what its objects say: the coordinator's Deployment, the agents' DaemonSet, the TLS Secret.

A release is named after the test's namespace (so its cluster-wide objects, ClusterRole and
SCCs, never collide with another test's) and uninstalled when the test ends. A test installing a
second release (one per node pool) makes it a namespace of its own with `another_namespace`.
"""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from coordinator.kube.client import Kube, KubeError, path
from testbed.cluster_api import TEST_LABEL
from testbed.harness.access import KubeCluster
from testbed.harness.ports import free_loopback_ports
from tests.support.helm import CHART, REPO, Helm, objects

# Where each kind the chart renders is served: (plural, namespaced).
RESOURCES = {
    "ClusterRole": ("clusterroles", False),
    "ClusterRoleBinding": ("clusterrolebindings", False),
    "DaemonSet": ("daemonsets", True),
    "Deployment": ("deployments", True),
    "Namespace": ("namespaces", False),
    "NetworkPolicy": ("networkpolicies", True),
    "PodDisruptionBudget": ("poddisruptionbudgets", True),
    "Role": ("roles", True),
    "RoleBinding": ("rolebindings", True),
    "Secret": ("secrets", True),
    "SecurityContextConstraints": ("securitycontextconstraints", False),
    "Service": ("services", True),
    "ServiceAccount": ("serviceaccounts", True),
    "ValidatingAdmissionPolicy": ("validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": ("validatingadmissionpolicybindings", False),
}
ADMISSION = ("admissionregistration.k8s.io", "v1")
SCC_CRD_ENV = "GPUCTL_OPENSHIFT_SCC_CRD"


def object_path(obj: Mapping[str, Any]) -> str:
    """The API path of a rendered object."""
    group, _, version = obj["apiVersion"].rpartition("/")
    plural, namespaced = RESOURCES[obj["kind"]]
    metadata = obj["metadata"]
    namespace = metadata.get("namespace") if namespaced else None
    return path(group, version, plural, namespace=namespace, name=metadata["name"])


@dataclass
class Release:
    """One installed release of the chart (release name == namespace)."""

    helm: Helm
    kube: Kube
    namespace: str
    values: Path

    @property
    def name(self) -> str:
        return self.namespace

    @property
    def fullname(self) -> str:
        return f"{self.namespace}-gpuctl"

    def install(self, *extra: str, chart: Path = CHART) -> str:
        """`helm install` of `chart` (this checkout's, or a packaged earlier one); returns its
        output (the NOTES)."""
        return self.helm.run(
            "install", self.name, str(chart), "--namespace", self.namespace,
            "--values", str(self.values), *extra,
        )  # fmt: skip

    def upgrade(self, *extra: str) -> str:
        return self.helm.run(
            "upgrade", self.name, str(CHART), "--namespace", self.namespace,
            "--values", str(self.values), *extra,
        )  # fmt: skip

    def uninstall(self) -> None:
        """`helm uninstall`; nothing to do when the release is not (or no longer) there."""
        self.helm.run(
            "uninstall", self.name, "--namespace", self.namespace, "--wait", "--ignore-not-found"
        )

    @property
    def module_guard(self) -> str:
        """The name of the chart's Module delete guard (policy and binding)."""
        return f"{self.fullname}-module-delete-guard"

    @property
    def nmc_guard(self) -> str:
        """The name of the chart's NodeModulesConfig delete guard (policy and binding)."""
        return f"{self.fullname}-nmc-delete-guard"

    @property
    def crd_guard(self) -> str:
        """The name of the chart's KMM CRD delete guard (policy and binding)."""
        return f"{self.fullname}-kmm-crd-delete-guard"

    @property
    def pool_guard(self) -> str:
        """The name of a shard's pool move guard (policy and binding)."""
        return f"{self.fullname}-pool-move-guard"

    def remove_guards(self) -> None:
        """docs/uninstall.md step 3: `helm uninstall` keeps the admission guards
        (helm.sh/resource-policy: keep); the admin deletes them once no gpuctl Module is left."""
        for name in (self.module_guard, self.nmc_guard, self.crd_guard, self.pool_guard):
            for plural in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
                with contextlib.suppress(KubeError):
                    self.kube.request("DELETE", path(*ADMISSION, plural, name=name))

    def manifest(self) -> list[dict[str, Any]]:
        return objects(self.helm.run("get", "manifest", self.name, "--namespace", self.namespace))

    def get(self, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        try:
            return self.kube.request("GET", object_path(obj))
        except KubeError as err:
            if err.not_found:
                return None
            raise

    def deployment(self) -> dict[str, Any]:
        return self.kube.request(
            "GET",
            path(
                "apps", "v1", "deployments",
                namespace=self.namespace, name=f"{self.fullname}-coordinator",
            ),
        )  # fmt: skip

    def daemonset(self) -> dict[str, Any]:
        return self.kube.request(
            "GET",
            path(
                "apps", "v1", "daemonsets", namespace=self.namespace, name=f"{self.fullname}-agent"
            ),
        )

    def ca_configmap_or_none(self) -> dict[str, Any] | None:
        """The CA ConfigMap the leading coordinator publishes (selfSigned), once it has."""
        try:
            return self.ca_configmap()
        except KubeError as err:
            if err.not_found:
                return None
            raise

    def ca_configmap(self) -> dict[str, Any]:
        return self.kube.request(
            "GET",
            path(
                "", "v1", "configmaps",
                namespace=self.namespace, name=f"{self.fullname}-coordinator-ca",
            ),
        )  # fmt: skip

    def tls_secret(self) -> dict[str, bytes]:
        secret = self.kube.request(
            "GET",
            path(
                "", "v1", "secrets",
                namespace=self.namespace, name=f"{self.fullname}-coordinator-tls",
            ),
        )  # fmt: skip
        return {key: base64.b64decode(value) for key, value in secret["data"].items()}


def base_values(namespace: str) -> dict[str, Any]:
    """Values every chart version takes: this test's GPUDrivers only, ports free here."""
    grpc_port, metrics_port, health_port, grpc_health_port = free_loopback_ports(4)
    return {
        "coordinator": {
            # Manage only this test's GPUDrivers; ports free on this machine, so the
            # coordinator can run with the rendered flags as they are.
            "gpudriverSelector": f"{TEST_LABEL}={namespace}",
            "grpc": {"port": grpc_port},
            "metricsPort": metrics_port,
        },
        "agent": {"healthPort": health_port, "grpcHealthPort": grpc_health_port},
    }


@contextlib.contextmanager
def chart_release(
    cluster: KubeCluster, kube: Kube, namespace: str, folder: Path, values: Mapping[str, Any]
) -> Iterator[Release]:
    """A Release of the chart for `namespace` (not installed yet); uninstalled on exit."""
    helm = Helm(folder / "helm", kubeconfig=cluster.kubeconfig)
    release = Release(helm, kube, namespace, helm.values_file(values))
    try:
        yield release
    finally:
        release.uninstall()
        release.remove_guards()


@contextlib.contextmanager
def another_namespace(kube: Kube) -> Iterator[str]:
    """A fresh namespace besides the test's own, for a second release; deleted on exit (after
    the release in it is uninstalled, when entered before chart_release)."""
    created = kube.request(
        "POST", path("", "v1", "namespaces"), body={"metadata": {"generateName": "t-"}}
    )
    name: str = created["metadata"]["name"]
    try:
        yield name
    finally:
        kube.request("DELETE", path("", "v1", "namespaces", name=name))


def scc_crd() -> Path:
    """OpenShift's SCC CRD: `$GPUCTL_OPENSHIFT_SCC_CRD` (hack/test) or hack/openshift/ensure."""
    configured = os.environ.get(SCC_CRD_ENV, "")
    if configured:
        return Path(configured)
    ensure = REPO / "hack" / "openshift" / "ensure"
    result = subprocess.run([str(ensure)], stdout=subprocess.PIPE, text=True, check=False)
    assert result.returncode == 0, f"{ensure} failed; see its messages above"
    return Path(result.stdout.strip())


def token_kubeconfig(cluster: KubeCluster, token: str, file: Path) -> Path:
    """A kubeconfig for the test cluster that authenticates with `token` (a ServiceAccount's),
    standing in for the in-cluster config a Pod of that ServiceAccount would have."""
    ca = base64.b64encode(cluster.ca_cert.read_bytes()).decode()
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "test",
                "cluster": {"server": cluster.server, "certificate-authority-data": ca},
            }
        ],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "sa"}}],
        "current-context": "test",
    }
    file.touch(mode=0o600)
    file.write_text(yaml.safe_dump(document))
    return file
