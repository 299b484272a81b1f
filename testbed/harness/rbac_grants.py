"""Grant a test's user or ServiceAccount some rules for the span of a `with`: a ClusterRole of
those rules bound cluster-wide to the subject (and, with `also`, more existing ClusterRoles,
e.g. Kubernetes' `system:aggregate-to-view`), all deleted on exit.

Tests that check what a role lets someone do (the chart's view role, a reader who may see
only GPUDrivers, an account that may query Prometheus) share this, so each says only which
rules and who.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from coordinator.kube.client import Kube, KubeError, path

RBAC = ("rbac.authorization.k8s.io", "v1")


def user(name: str) -> dict[str, str]:
    """A user (as a client certificate's common name names one) as a binding's subject."""
    return {"kind": "User", "name": name, "apiGroup": RBAC[0]}


def service_account(namespace: str, name: str) -> dict[str, str]:
    """A ServiceAccount as a binding's subject."""
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


def _binding(name: str, role: str, subject: Mapping[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": RBAC[0], "kind": "ClusterRole", "name": role},
        "subjects": [dict(subject)],
    }


@contextlib.contextmanager
def granted(
    kube: Kube,
    name: str,
    rules: Sequence[Mapping[str, Any]],
    subject: Mapping[str, str],
    *,
    also: Sequence[str] = (),
) -> Iterator[None]:
    """ClusterRole `name` with `rules`, bound to `subject`, and `also`'s ClusterRoles bound to it
    too (bindings `name-<role>`); everything deleted on exit."""
    made: list[tuple[str, str]] = []
    try:
        kube.request(
            "POST", path(*RBAC, "clusterroles"), body={"metadata": {"name": name}, "rules": rules}
        )
        made.append(("clusterroles", name))
        bindings = [(name, name)] + [(f"{name}-{r.replace(':', '-')}", r) for r in also]
        for binding, role in bindings:
            kube.request(
                "POST", path(*RBAC, "clusterrolebindings"), body=_binding(binding, role, subject)
            )
            made.append(("clusterrolebindings", binding))
        yield
    finally:
        for plural, made_name in reversed(made):
            with contextlib.suppress(KubeError):
                kube.request("DELETE", path(*RBAC, plural, name=made_name))
