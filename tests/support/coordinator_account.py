"""The coordinator as the chart runs it: ServiceAccount `coordinator` with the chart's RBAC.

`bind_coordinator_account` makes the ServiceAccount and binds it to coordinator/rbac.py's
rules (what the chart grants); tests/support/chart_release.py's `token_kubeconfig` writes a
kubeconfig with a token of it, for a coordinator process. Used where the caller's identity
matters: the RBAC test, and the Module delete guard, which lets exactly the coordinator's
ServiceAccount delete a gpuctl Module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from coordinator.kube.client import Kube, KubeError, path
from coordinator.module_guard import service_account_username
from coordinator.rbac import CLUSTER_RULES, NAMESPACE_RULES

RBAC = "rbac.authorization.k8s.io"
ACCOUNT = "coordinator"


def coordinator_username(namespace: str) -> str:
    return service_account_username(namespace, ACCOUNT)


@contextlib.contextmanager
def bind_coordinator_account(kube: Kube, namespace: str) -> Iterator[str]:
    """ServiceAccount `coordinator` in `namespace`, bound to the chart's ClusterRole and Role
    rules; yields its name, removes the cluster-wide objects afterwards."""
    cluster_role = f"{namespace}-coordinator"
    subject = [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}]
    kube.request(
        "POST",
        path("", "v1", "serviceaccounts", namespace=namespace),
        body={"metadata": {"name": ACCOUNT}},
    )
    kube.request(
        "POST",
        path(RBAC, "v1", "clusterroles"),
        body={"metadata": {"name": cluster_role}, "rules": CLUSTER_RULES},
    )
    kube.request(
        "POST",
        path(RBAC, "v1", "clusterrolebindings"),
        body={
            "metadata": {"name": cluster_role},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": cluster_role},
            "subjects": subject,
        },
    )
    kube.request(
        "POST",
        path(RBAC, "v1", "roles", namespace=namespace),
        body={"metadata": {"name": ACCOUNT}, "rules": NAMESPACE_RULES},
    )
    kube.request(
        "POST",
        path(RBAC, "v1", "rolebindings", namespace=namespace),
        body={
            "metadata": {"name": ACCOUNT},
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": ACCOUNT},
            "subjects": subject,
        },
    )
    try:
        yield ACCOUNT
    finally:
        for kind in ("clusterrolebindings", "clusterroles"):
            with contextlib.suppress(KubeError):
                kube.request("DELETE", path(RBAC, "v1", kind, name=cluster_role))
