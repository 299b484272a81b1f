"""The coordinator's ServiceAccount bound to exactly the chart's rules, and what the API
server's audit log says that account did.

`bound_coordinator` creates ServiceAccount `coordinator` in the test namespace with the rules of
coordinator/policies/rbac.py bound as the chart binds them (the cluster rules everywhere, the
namespace rules in the namespace, the Events rules in the Events namespace), and removes the
cluster-wide objects afterwards. `audited_calls` reads the test control plane's audit log
(testbed/harness/flags.py records every ServiceAccount's requests) into `Call`s, and `grant_of`
says which declared grant allowed a call.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from coordinator.kube.client import Kube, KubeError, path
from coordinator.policies.rbac import (
    CLUSTER_RULES,
    EVENTS_RULES,
    NAMESPACE_RULES,
    OWN_NAMESPACE,
    SELF_SIGNED_TLS_RULES,
    SIGNING_CERTIFICATE_RULES,
    SIGNING_CERTIFICATES,
    TLS_CONFIGMAP_NAME,
    TLS_SECRET_NAME,
)

RBAC = "rbac.authorization.k8s.io"
ACCOUNT = "coordinator"


def username(namespace: str, account: str = ACCOUNT) -> str:
    return f"system:serviceaccount:{namespace}:{account}"


@dataclass(frozen=True)
class Grant:
    """One verb on one resource in one of the rule sets: "cluster", "namespace", "events"."""

    rules: str
    group: str
    resource: str  # with its subresource: "pods/eviction"
    verb: str


@dataclass(frozen=True)
class Call:
    """One request as the audit log records it."""

    verb: str
    group: str
    resource: str  # with its subresource
    namespace: str  # "" for cluster-scoped objects and cluster-wide lists/watches
    code: int


def tls_rules(secret: str, configmap: str) -> list[dict[str, Any]]:
    """SELF_SIGNED_TLS_RULES with the names the chart would put in."""
    text = json.dumps(SELF_SIGNED_TLS_RULES)
    return list(
        json.loads(text.replace(TLS_SECRET_NAME, secret).replace(TLS_CONFIGMAP_NAME, configmap))
    )


def signing_rules(secrets: Sequence[str]) -> list[dict[str, Any]]:
    """SIGNING_CERTIFICATE_RULES with the chart's coordinator.signingCertificateSecrets."""
    return [
        {**rule, "resourceNames": list(secrets)}
        if rule.get("resourceNames") == [SIGNING_CERTIFICATES]
        else rule
        for rule in SIGNING_CERTIFICATE_RULES
    ]


def cluster_rules(namespace: str) -> list[dict[str, Any]]:
    """CLUSTER_RULES with the coordinator's own namespace put in, as the chart does."""
    return list(json.loads(json.dumps(CLUSTER_RULES).replace(OWN_NAMESPACE, namespace)))


def declared_grants(*, tls: bool = False, signing: bool = False) -> set[Grant]:
    """The grants of the chart's rule sets; with `tls`, only the self-signed TLS Role's; with
    `signing`, only the signing certificates' Role's (coordinator.signingCertificateSecrets)."""
    grants: set[Grant] = set()
    sets = (
        [("tls", SELF_SIGNED_TLS_RULES)]
        if tls
        else [("signing", SIGNING_CERTIFICATE_RULES)]
        if signing
        else [("cluster", CLUSTER_RULES), ("namespace", NAMESPACE_RULES), ("events", EVENTS_RULES)]
    )
    for name, rules in sets:
        for rule in rules:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    grants.update(Grant(name, group, resource, v) for v in rule["verbs"])
    return grants


def grant_of(call: Call, namespace: str, events_namespace: str) -> set[Grant]:
    """The declared grants that allow `call` (empty: the chart does not allow it)."""
    scopes = {"cluster"}
    if call.namespace == namespace:
        scopes |= {"namespace", "tls", "signing"}
    if call.namespace == events_namespace:
        scopes.add("events")
    return {
        g
        for g in declared_grants() | declared_grants(tls=True) | declared_grants(signing=True)
        if g.rules in scopes
        and (g.group, g.resource, g.verb) == (call.group, call.resource, call.verb)
    }


def audited_calls(audit_log: Path, user: str) -> list[Call]:
    """Every resource request `user` made, as the API server recorded it (non-resource
    requests, discovery's /apis, are left out: every authenticated user may make them)."""
    calls = []
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        if event["user"]["username"] != user or "objectRef" not in event:
            continue
        ref = event["objectRef"]
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        calls.append(
            Call(
                verb=event["verb"],
                group=ref.get("apiGroup", ""),
                resource=resource,
                namespace=ref.get("namespace", ""),
                code=int((event.get("responseStatus") or {}).get("code", 0)),
            )
        )
    return calls


def token_kubeconfig(target: Path, server: str, ca_cert: Path, token: str) -> Path:
    """A kubeconfig that authenticates with `token` (a ServiceAccount's)."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": server, "certificate-authority": str(ca_cert)}}
        ],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "sa"}}],
        "current-context": "test",
    }
    target.write_text(yaml.safe_dump(document))
    target.chmod(0o600)
    return target


def _role_and_binding(
    kube: Kube,
    *,
    kind: str,
    name: str,
    namespace: str | None,
    rules: Sequence[dict[str, Any]],
    subject: dict[str, str],
) -> None:
    plural = "clusterroles" if kind == "ClusterRole" else "roles"
    bindings = "clusterrolebindings" if kind == "ClusterRole" else "rolebindings"
    kube.request(
        "POST",
        path(RBAC, "v1", plural, namespace=namespace),
        body={"metadata": {"name": name}, "rules": list(rules)},
    )
    kube.request(
        "POST",
        path(RBAC, "v1", bindings, namespace=namespace),
        body={
            "metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC, "kind": kind, "name": name},
            "subjects": [subject],
        },
    )


@contextlib.contextmanager
def bound_coordinator(
    kube: Kube,
    namespace: str,
    events_namespace: str = "default",
    tls_names: tuple[str, str] | None = None,
    signing_certificates: Sequence[str] = (),
) -> Iterator[str]:
    """ServiceAccount `coordinator` in `namespace` with the chart's rules; yields its name.
    With `tls_names` (Secret, ConfigMap) also the selfSigned mode's TLS Role; with
    `signing_certificates` the Role coordinator.signingCertificateSecrets adds."""
    kube.request(
        "POST",
        path("", "v1", "serviceaccounts", namespace=namespace),
        body={"metadata": {"name": ACCOUNT}},
    )
    subject = {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}
    cluster_name = f"{namespace}-coordinator"
    events_name = f"{namespace}-coordinator-events"
    roles: list[tuple[str, str, str | None, list[dict[str, Any]]]] = [
        ("ClusterRole", cluster_name, None, cluster_rules(namespace)),
        ("Role", ACCOUNT, namespace, NAMESPACE_RULES),
        ("Role", events_name, events_namespace, EVENTS_RULES),
    ]
    if tls_names is not None:
        roles.append(("Role", f"{ACCOUNT}-tls", namespace, tls_rules(*tls_names)))
    if signing_certificates:
        roles.append(("Role", f"{ACCOUNT}-signing", namespace, signing_rules(signing_certificates)))
    for kind, name, scope, rules in roles:
        _role_and_binding(kube, kind=kind, name=name, namespace=scope, rules=rules, subject=subject)
    try:
        yield ACCOUNT
    finally:
        for resource_path in (
            path(RBAC, "v1", "clusterrolebindings", name=cluster_name),
            path(RBAC, "v1", "clusterroles", name=cluster_name),
            path(RBAC, "v1", "rolebindings", namespace=events_namespace, name=events_name),
            path(RBAC, "v1", "roles", namespace=events_namespace, name=events_name),
        ):
            with contextlib.suppress(KubeError):
                kube.request("DELETE", resource_path)
