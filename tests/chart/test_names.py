"""fullnameOverride and nameOverride rename everything the chart makes, and the chart still
agrees with itself: every binding names a rendered role and ServiceAccount, every Pod a rendered
ServiceAccount, the agents (and `helm test`) dial the rendered gRPC Service, the coordinator's
flags name its rendered Lease grant, TLS objects and ServiceAccounts, the admission guards name
the coordinator's account and their own policies. The labels keep the chart's name:
`gpuctl support-bundle` selects Pods by app.kubernetes.io/name=gpuctl."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.test_render import Rendered, args_of, pod_spec
from tests.support.helm import Helm, find

RELEASE = "prod"
NAMESPACE = "gpu-fleet"
SA_USER = f"system:serviceaccount:{NAMESPACE}:"
POD_KINDS = ("Deployment", "DaemonSet", "Job")
# Every option that renders objects of its own, so that each one's names are checked.
EVERY_PART: dict[str, Any] = {
    "openshift": {"enabled": True},
    "podSecurity": {"labelNamespace": True},
    "shard": {"nodeSelector": {"gpuctl.dev/pool": "a"}},
    "networkPolicy": {"enabled": True},
    "crds": {"upgrade": True},
    "metrics": {
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "grafanaDashboard": {"enabled": True},
    },
}


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(tmp_path_factory.mktemp("helm"))


def render(helm: Helm, names: dict[str, str], tls_mode: str) -> Rendered:
    coordinator = {
        "gpudriverSelector": "gpuctl.dev/pool=a",
        "signingCertificateSecrets": ["xe-signing-cert"],
        "grpc": {"tls": {"mode": tls_mode}},
    }
    values = {**EVERY_PART, **names, "coordinator": coordinator}
    return helm.template(values, release=RELEASE, namespace=NAMESPACE)


def named(rendered: Rendered, kind: str, name: str, namespace: str | None) -> dict[str, Any]:
    found = [
        o
        for o in rendered
        if (o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))
        == (kind, name, namespace)
    ]
    assert len(found) == 1, f"{kind} {namespace}/{name} is referred to, but not rendered"
    return found[0]


def flags(args: list[str]) -> dict[str, str]:
    return dict(a.split("=", 1) for a in args if "=" in a)


def pod_template(rendered: Rendered, kind: str) -> dict[str, Any]:
    template: dict[str, Any] = find(rendered, kind)["spec"]["template"]
    return template


def check_bindings(rendered: Rendered) -> None:
    bindings = [o for o in rendered if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert len(bindings) >= 6
    for binding in bindings:
        ref = binding["roleRef"]
        role_namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        named(rendered, ref["kind"], ref["name"], role_namespace)
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount"
            named(rendered, "ServiceAccount", subject["name"], subject["namespace"])


def check_pods(rendered: Rendered) -> None:
    specs = [pod_spec(rendered, kind) for kind in POD_KINDS]
    specs.append(find(rendered, "Pod")["spec"])  # helm test's
    for spec in specs:
        named(rendered, "ServiceAccount", spec["serviceAccountName"], NAMESPACE)
    # The Services select the coordinator's Pods (the gRPC one only the leader, which labels
    # itself gpuctl.dev/grpc-serving=true), the PDB and NetworkPolicy too.
    labels = pod_template(rendered, "Deployment")["metadata"]["labels"]
    serving = {**labels, "gpuctl.dev/grpc-serving": "true"}
    for service in (o for o in rendered if o["kind"] == "Service"):
        assert service["spec"]["selector"].items() <= serving.items()
    for kind in ("PodDisruptionBudget", "NetworkPolicy"):
        obj = find(rendered, kind)["spec"]
        selector = obj.get("selector") or obj["podSelector"]
        assert selector["matchLabels"].items() <= labels.items()
    monitor = find(rendered, "ServiceMonitor")["spec"]["selector"]["matchLabels"]
    metrics = find(rendered, "Service", "-coordinator-metrics")["metadata"]["labels"]
    assert monitor.items() <= metrics.items()


def check_dialled_service(rendered: Rendered, address: str) -> None:
    host, _, port = address.rpartition(":")
    service_name, _, rest = host.partition(".")
    assert rest == f"{NAMESPACE}.svc"
    service = named(rendered, "Service", service_name, NAMESPACE)
    assert int(port) in [p["port"] for p in service["spec"]["ports"]]


def check_coordinator_flags(rendered: Rendered, tls_mode: str) -> None:
    coordinator = flags(args_of(rendered, "Deployment"))
    agent_account = pod_spec(rendered, "DaemonSet")["serviceAccountName"]
    assert coordinator["--agent-service-account"] == SA_USER + agent_account
    loader = coordinator["--module-loader-service-account"]
    named(rendered, "ServiceAccount", loader, NAMESPACE)
    sccs = [o for o in rendered if o["kind"] == "SecurityContextConstraints"]
    users = sorted(user for scc in sccs for user in scc["users"])
    assert users == sorted([SA_USER + agent_account, SA_USER + loader])
    # The view role may read the Lease the coordinator leads through.
    view = next(o for o in rendered if o["metadata"]["name"].endswith("-view"))
    lease_rule = next(r for r in view["rules"] if r["resources"] == ["leases"])
    assert lease_rule["resourceNames"] == [coordinator["--lease-name"]]
    ca_volume = next(
        v for v in pod_spec(rendered, "DaemonSet")["volumes"] if v["name"] == "coordinator-ca"
    )
    if tls_mode == "selfSigned":
        named(rendered, "Service", coordinator["--tls-service"], NAMESPACE)
        own = find(rendered, "Role", "-coordinator-tls")["rules"]
        granted = {name for rule in own for name in rule.get("resourceNames", [])}
        assert granted == {coordinator["--tls-secret"], coordinator["--tls-ca-configmap"]}
        assert ca_volume["configMap"]["name"] == coordinator["--tls-ca-configmap"]
    else:
        certificate = find(rendered, "Certificate", "-coordinator")["spec"]
        served = next(v for v in pod_spec(rendered, "Deployment")["volumes"] if "secret" in v)
        secret = certificate["secretName"]
        assert served["secret"]["secretName"] == ca_volume["secret"]["secretName"] == secret
        service = find(rendered, "Service", "-coordinator")["metadata"]["name"]
        assert f"{service}.{NAMESPACE}.svc" in certificate["dnsNames"]
        issuer = certificate["issuerRef"]["name"]
        named(rendered, "Issuer", issuer, NAMESPACE)


def check_guards(rendered: Rendered) -> None:
    policies = {o["metadata"]["name"] for o in rendered if o["kind"] == "ValidatingAdmissionPolicy"}
    bindings = [o for o in rendered if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert len(bindings) == len(policies) >= 5  # Module, NMC, KMM CRD, pool move, worker hold
    assert {b["spec"]["policyName"] for b in bindings} == policies
    guard = find(rendered, "ValidatingAdmissionPolicy", "-module-delete-guard")["spec"]
    by_coordinator = next(v for v in guard["variables"] if v["name"] == "byCoordinator")
    account = pod_spec(rendered, "Deployment")["serviceAccountName"]
    assert by_coordinator["expression"].endswith(f"== '{SA_USER}{account}'")


@pytest.mark.parametrize("tls_mode", ["selfSigned", "certManager"])
@pytest.mark.parametrize(
    ("names", "fullname"),
    [
        ({"fullnameOverride": "xe-fleet"}, "xe-fleet"),
        ({"nameOverride": "xe"}, "prod-xe"),
        ({"nameOverride": "prod"}, "prod"),  # a release name holding it is not repeated
        ({"fullnameOverride": "xe-fleet", "nameOverride": "ignored"}, "xe-fleet"),
    ],
    ids=["fullnameOverride", "nameOverride", "nameOverride in the release name", "both"],
)
def test_an_override_renames_everything_and_every_reference_follows(
    helm: Helm, names: dict[str, str], fullname: str, tls_mode: str
) -> None:
    rendered = render(helm, names, tls_mode)
    for obj in rendered:
        name = obj["metadata"]["name"]
        if obj["kind"] != "Namespace":
            assert name == fullname or name.startswith(f"{fullname}-"), (obj["kind"], name)
        assert obj["metadata"]["labels"]["app.kubernetes.io/name"] == "gpuctl", name
    for kind in ("Deployment", "DaemonSet"):
        labels = pod_template(rendered, kind)["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "gpuctl"
    check_bindings(rendered)
    check_pods(rendered)
    check_dialled_service(rendered, flags(args_of(rendered, "DaemonSet"))["--coordinator"])
    check_dialled_service(
        rendered, flags(find(rendered, "Pod")["spec"]["containers"][0]["args"])["--coordinator"]
    )
    check_coordinator_flags(rendered, tls_mode)
    check_guards(rendered)


def test_without_an_override_the_names_are_the_releases(helm: Helm) -> None:
    """The default is unchanged: the release name, with the chart's name added unless the
    release name holds it."""
    for release, fullname in (("gpuctl", "gpuctl"), ("prod", "prod-gpuctl")):
        rendered = helm.template(release=release)
        assert find(rendered, "Deployment")["metadata"]["name"] == f"{fullname}-coordinator"
