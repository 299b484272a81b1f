"""`helm template` of the chart under every supported values combination: the output parses,
and each option does what values.yaml promises (and nothing it does not)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.__main__ import build_parser as build_agent_parser
from coordinator.main import parse_args
from coordinator.policies import pool_guard, worker_hold_guard
from tests.support.helm import Helm, HelmError, find, kinds

Rendered = list[dict[str, Any]]
NFD_LABELS = [
    "feature.node.kubernetes.io/pci-0300_8086.present",
    "feature.node.kubernetes.io/pci-0380_8086.present",
]
BASE_KINDS = [
    *["ClusterRole"] * 5,  # the coordinator's, view, edit, rollout-retry, helm test's
    "ClusterRoleBinding",
    "ClusterRoleBinding",  # helm test's
    "DaemonSet",
    "Deployment",
    "Pod",  # helm test's (a hook: made by `helm test` only)
    "PodDisruptionBudget",
    *["Role", "RoleBinding"] * 3,  # the coordinator's, its Events', its own TLS (selfSigned)
    "Service",
    "Service",  # gRPC and metrics
    "ServiceAccount",
    "ServiceAccount",
    "ServiceAccount",  # helm test's
    # The Module, NodeModulesConfig and KMM CRD delete guards (coordinator/policies/module_guard.py,
    # nmc_guard.py, kmm_crd_guard.py; docs/uninstall.md) and the worker hold guard
    # (worker_hold_guard.py).
    *["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 4,
]


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(tmp_path_factory.mktemp("helm"))


def pod_spec(rendered: Rendered, kind: str) -> dict[str, Any]:
    spec: dict[str, Any] = find(rendered, kind)["spec"]["template"]["spec"]
    return spec


def container(rendered: Rendered, kind: str) -> dict[str, Any]:
    containers: list[dict[str, Any]] = pod_spec(rendered, kind)["containers"]
    assert len(containers) == 1
    return containers[0]


def args_of(rendered: Rendered, kind: str) -> list[str]:
    return list(container(rendered, kind)["args"])


def node_terms(rendered: Rendered) -> list[list[dict[str, Any]]]:
    affinity = pod_spec(rendered, "DaemonSet")["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return [term["matchExpressions"] for term in terms]


def linux_and(label: str | None) -> list[dict[str, Any]]:
    expressions: list[dict[str, Any]] = [
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}
    ]
    if label is not None:
        expressions.append({"key": label, "operator": "In", "values": ["true"]})
    return expressions


def check_defaults(rendered: Rendered) -> None:
    assert kinds(rendered) == sorted(BASE_KINDS)
    # Fully qualified: the names hack/images/build gives, never a Docker Hub lookup.
    assert container(rendered, "Deployment")["image"] == "localhost/gpuctl-coordinator:0.1.0"
    assert container(rendered, "DaemonSet")["image"] == "localhost/gpuctl-agent:0.1.0"
    for kind in ("Deployment", "DaemonSet"):
        assert "imagePullSecrets" not in pod_spec(rendered, kind)
    assert node_terms(rendered) == [linux_and(label) for label in NFD_LABELS]
    assert "seLinuxOptions" not in container(rendered, "DaemonSet")["securityContext"]
    assert not any(
        a.startswith("--module-loader-service-account") for a in args_of(rendered, "Deployment")
    )
    assert not any(a.startswith("--gpudriver-selector") for a in args_of(rendered, "Deployment"))
    assert not any(a.startswith("--node-selector") for a in args_of(rendered, "Deployment"))
    assert "nodeSelector" not in pod_spec(rendered, "DaemonSet")
    assert "--allow-node-changes" not in args_of(rendered, "DaemonSet")
    # The coordinator holds KMM's worker off a node opened after its check, and the chart's
    # guard (coordinator/policies/worker_hold_guard.py, for the release namespace) enforces it.
    assert "--kmm-worker-hold" in args_of(rendered, "Deployment")
    hold = [o for o in rendered if o["metadata"]["name"] == "gpuctl-kmm-worker-hold"]
    expected = worker_hold_guard.guard_objects("gpuctl-kmm-worker-hold", "gpuctl-system")
    assert [o["spec"] for o in hold] == [o["spec"] for o in expected]
    # Kept through `helm rollback` and a downgrade to a chart without it (and uninstall).
    assert {o["metadata"]["annotations"]["helm.sh/resource-policy"] for o in hold} == {"keep"}
    # selfSigned: the coordinator makes its own Secret; nothing rendered holds a key.
    assert "PRIVATE KEY" not in json.dumps(rendered)
    assert "--tls-secret=gpuctl-coordinator-tls" in args_of(rendered, "Deployment")
    assert "volumes" not in pod_spec(rendered, "Deployment")
    ca_volume = next(v for v in pod_spec(rendered, "DaemonSet")["volumes"] if "configMap" in v)
    assert ca_volume["configMap"]["name"] == "gpuctl-coordinator-ca"
    probes = container(rendered, "Deployment")
    assert probes["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert probes["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert "ServiceMonitor" not in kinds(rendered)


def check_openshift(rendered: Rendered) -> None:
    agent_scc = find(rendered, "SecurityContextConstraints", "-agent-scc")
    loader_scc = find(rendered, "SecurityContextConstraints", "-module-loader-scc")
    assert agent_scc["users"] == ["system:serviceaccount:gpuctl-system:gpuctl-agent"]
    assert agent_scc["allowedCapabilities"] == ["SYS_PTRACE", "DAC_READ_SEARCH"]
    assert agent_scc["allowPrivilegedContainer"] is False
    assert loader_scc["users"] == ["system:serviceaccount:gpuctl-system:gpuctl-module-loader"]
    assert loader_scc["allowedCapabilities"] == ["SYS_MODULE"]
    for scc in (agent_scc, loader_scc):
        assert scc["priority"] is None
        assert scc["defaultAddCapabilities"] == []
        assert scc["requiredDropCapabilities"] == []
    find(rendered, "ServiceAccount", "-module-loader")
    assert "--module-loader-service-account=gpuctl-module-loader" in args_of(rendered, "Deployment")
    security = container(rendered, "DaemonSet")["securityContext"]
    assert security["seLinuxOptions"] == {"type": "spc_t"}
    # The SCC admits what the DaemonSet asks for.
    assert agent_scc["runAsUser"] == {"type": "MustRunAs", "uid": security["runAsUser"]}
    assert set(security["capabilities"]["add"]) <= set(agent_scc["allowedCapabilities"])
    volumes = {
        next(k for k in v if k != "name") for v in pod_spec(rendered, "DaemonSet")["volumes"]
    }
    assert volumes <= set(agent_scc["volumes"])


def check_own_tls_secret(rendered: Rendered) -> None:
    assert "Secret" not in kinds(rendered)
    coordinator_volumes = pod_spec(rendered, "Deployment")["volumes"]
    agent_volumes = pod_spec(rendered, "DaemonSet")["volumes"]
    secret_names = {
        v["secret"]["secretName"] for v in [*coordinator_volumes, *agent_volumes] if "secret" in v
    }
    assert secret_names == {"my-tls"}


def check_cert_manager(rendered: Rendered) -> None:
    certificate = find(rendered, "Certificate", "-coordinator")
    assert certificate["spec"]["secretName"] == "gpuctl-coordinator-tls"
    assert "gpuctl-coordinator.gpuctl-system.svc" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["issuerRef"]["name"] == "gpuctl-grpc-ca"  # the chart's CA chain
    assert "--tls-cert-file=/etc/gpuctl/grpc-tls/tls.crt" in args_of(rendered, "Deployment")
    assert "PRIVATE KEY" not in json.dumps(rendered)


def check_ca_from_the_system(rendered: Rendered) -> None:
    assert "Certificate" in kinds(rendered)
    assert not any(a.startswith("--ca-file") for a in args_of(rendered, "DaemonSet"))
    assert not any(
        v["name"] == "coordinator-ca" for v in pod_spec(rendered, "DaemonSet")["volumes"]
    )


def check_signing_certificates(rendered: Rendered) -> None:
    role = find(rendered, "Role", "-coordinator-signing")
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["xe-signing-cert", "fleet-cert"],
            "verbs": ["get"],
        }
    ]
    binding = find(rendered, "RoleBinding", "-coordinator-signing")
    assert binding["subjects"][0]["name"] == "gpuctl-coordinator"


def check_service_monitor(rendered: Rendered) -> None:
    monitor = find(rendered, "ServiceMonitor")
    service = find(rendered, "Service", "-coordinator-metrics")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["metadata"]["labels"]["release"] == "prometheus"


def check_allow_node_changes(rendered: Rendered) -> None:
    assert "--allow-node-changes" in args_of(rendered, "DaemonSet")
    mounts = {m["name"]: m for m in container(rendered, "DaemonSet")["volumeMounts"]}
    assert mounts["host-sys"]["mountPath"] == "/host/sys"
    assert "readOnly" not in mounts["host-sys"]
    assert mounts["host-proc"]["readOnly"] is True  # every other host path stays read-only


def check_selector(rendered: Rendered) -> None:
    assert "--gpudriver-selector=team=a,tier in (gold)" in args_of(rendered, "Deployment")


def check_shard(rendered: Rendered) -> None:
    assert "--node-selector=gpuctl.dev/pool=a,zone=z1" in args_of(rendered, "Deployment")
    # The agents run only on the pool's nodes, on top of agent.nodeSelector (zone agrees).
    assert pod_spec(rendered, "DaemonSet")["nodeSelector"] == {
        "gpu": "yes",
        "gpuctl.dev/pool": "a",
        "zone": "z1",
    }
    assert node_terms(rendered) == [linux_and(label) for label in NFD_LABELS]
    # The coordinator itself may run anywhere.
    assert "nodeSelector" not in pod_spec(rendered, "Deployment")
    # The pool move guard (coordinator/policies/pool_guard.py), for the pool's labels: a shard's
    # only.
    guards = [o for o in rendered if o["metadata"]["name"].endswith("-pool-move-guard")]
    assert [o["kind"] for o in guards] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    pool = pool_guard.pool_literal({"zone": "z1", "gpuctl.dev/pool": "a"})
    expected = pool_guard.guard_objects(guards[0]["metadata"]["name"], pool)
    assert [o["spec"] for o in guards] == [o["spec"] for o in expected]


def check_images(rendered: Rendered) -> None:
    digest = "sha256:" + "ab" * 32
    coordinator = "registry.example.com/gpuctl/gpuctl-coordinator:1.2"
    assert container(rendered, "Deployment")["image"] == coordinator
    assert container(rendered, "DaemonSet")["image"] == f"mirror.example.com/gpuctl-agent@{digest}"
    assert pod_spec(rendered, "Deployment")["imagePullSecrets"] == [
        {"name": "everywhere"},
        {"name": "coordinator-only"},
    ]
    assert pod_spec(rendered, "DaemonSet")["imagePullSecrets"] == [{"name": "everywhere"}]


def check_every_linux_node(rendered: Rendered) -> None:
    assert node_terms(rendered) == [linux_and(None)]
    assert pod_spec(rendered, "DaemonSet")["nodeSelector"] == {"gpu": "yes"}


def check_own_affinity(rendered: Rendered) -> None:
    affinity = pod_spec(rendered, "DaemonSet")["affinity"]
    assert affinity == {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}


def check_selinux_elsewhere(rendered: Rendered) -> None:
    assert "SecurityContextConstraints" not in kinds(rendered)
    security = container(rendered, "DaemonSet")["securityContext"]
    assert security["seLinuxOptions"] == {"type": "gpuctl_agent_t"}


def check_selinux_type(rendered: Rendered, expected: str) -> None:
    security = container(rendered, "DaemonSet")["securityContext"]
    assert security["seLinuxOptions"] == {"type": expected}


def check_label_namespace(rendered: Rendered) -> None:
    namespace = find(rendered, "Namespace")
    assert namespace["metadata"]["name"] == "gpuctl-system"
    labels = namespace["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "privileged"
    assert namespace["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


CASES: dict[str, tuple[dict[str, Any], Callable[[Rendered], None]]] = {
    "defaults": ({}, check_defaults),
    "openshift": ({"openshift": {"enabled": True}}, check_openshift),
    "own TLS Secret": ({"coordinator": {"grpc": {"tlsSecret": "my-tls"}}}, check_own_tls_secret),
    "allowNodeChanges": ({"agent": {"allowNodeChanges": True}}, check_allow_node_changes),
    "gpudriverSelector": (
        {"coordinator": {"gpudriverSelector": "team=a,tier in (gold)"}},
        check_selector,
    ),
    "shard.nodeSelector": (
        {
            "shard": {"nodeSelector": {"zone": "z1", "gpuctl.dev/pool": "a"}},
            "coordinator": {"gpudriverSelector": "gpuctl.dev/pool=a"},
            "agent": {"nodeSelector": {"gpu": "yes", "zone": "z1"}},
        },
        check_shard,
    ),
    "registries, digest and pull secrets": (
        {
            "global": {
                "imageRegistry": "registry.example.com/gpuctl/",
                "imagePullSecrets": [{"name": "everywhere"}],
            },
            "coordinator": {
                "image": {"tag": "1.2"},
                "imagePullSecrets": [{"name": "everywhere"}, {"name": "coordinator-only"}],
            },
            "agent": {
                "image": {
                    "registry": "mirror.example.com",
                    "tag": "ignored",
                    "digest": "sha256:" + "ab" * 32,
                }
            },
        },
        check_images,
    ),
    "every Linux node": (
        {"agent": {"gpuNodeLabels": [], "nodeSelector": {"gpu": "yes"}}},
        check_every_linux_node,
    ),
    "own agent affinity": (
        {
            "agent": {
                "affinity": {
                    "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}
                }
            }
        },
        check_own_affinity,
    ),
    "SELinux type without OpenShift": (
        {"agent": {"seLinuxType": "gpuctl_agent_t"}},
        check_selinux_elsewhere,
    ),
    "OpenShift with its own SELinux type": (
        {"openshift": {"enabled": True}, "agent": {"seLinuxType": "gpuctl_agent_t"}},
        lambda rendered: check_selinux_type(rendered, "gpuctl_agent_t"),
    ),
    "cert-manager": (
        {"coordinator": {"grpc": {"tls": {"mode": "certManager"}}}},
        check_cert_manager,
    ),
    "ACME issuer, CA from the system store": (
        {
            "coordinator": {
                "grpc": {
                    "tls": {
                        "mode": "certManager",
                        "certManager": {"issuerRef": {"name": "le", "kind": "ClusterIssuer"}},
                        "ca": {"source": "system"},
                    }
                }
            }
        },
        check_ca_from_the_system,
    ),
    "ServiceMonitor": (
        {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}}},
        check_service_monitor,
    ),
    "coordinator.signingCertificateSecrets": (
        {"coordinator": {"signingCertificateSecrets": ["xe-signing-cert", "fleet-cert"]}},
        check_signing_certificates,
    ),
    "podSecurity.labelNamespace": (
        {"podSecurity": {"labelNamespace": True}},
        check_label_namespace,
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_each_option_renders_what_it_promises(helm: Helm, case: str) -> None:
    values, check = CASES[case]
    check(helm.template(values))


SHARD = {"gpuctl.dev/pool": "a"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"shard": {"nodeSelector": SHARD}},
            "shard.nodeSelector needs coordinator.gpudriverSelector: each shard must manage only"
            " its own node pool's GPUDrivers",
        ),
        (
            {
                "shard": {"nodeSelector": SHARD},
                "coordinator": {"gpudriverSelector": "gpuctl.dev/pool=a"},
                "agent": {"nodeSelector": {"gpuctl.dev/pool": "b"}},
            },
            "agent.nodeSelector and shard.nodeSelector disagree on label gpuctl.dev/pool:"
            ' "b" in agent.nodeSelector, "a" in shard.nodeSelector',
        ),
    ],
    ids=["without gpudriverSelector", "agent.nodeSelector disagrees"],
)
def test_a_shard_that_cannot_work_is_refused(
    helm: Helm, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(HelmError) as refused:
        helm.template(values)
    assert message in refused.value.stderr


def shared_objects(rendered: Rendered, namespace: str) -> set[tuple[str, str, str | None]]:
    """(kind, name, namespace) of each object outside the release namespace: cluster-scoped
    ones, and the Events Role in coordinator.eventsNamespace."""
    return {
        (o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))
        for o in rendered
        if o["metadata"].get("namespace") != namespace
    }


def test_two_shards_share_no_object(helm: Helm) -> None:
    """One release per node pool, each in its own namespace under its own name: no object
    outside its namespace has the same name as the other's, with every option that renders
    one (helm would refuse the second install). The same release name would collide."""
    renders_more_shared = {"openshift": {"enabled": True}, "podSecurity": {"labelNamespace": True}}

    def shard(pool: str, release: str) -> set[tuple[str, str, str | None]]:
        values = {
            **renders_more_shared,
            "shard": {"nodeSelector": {"gpuctl.dev/pool": pool}},
            "coordinator": {"gpudriverSelector": f"gpuctl.dev/pool={pool}"},
        }
        namespace = f"gpuctl-{pool}"
        return shared_objects(
            helm.template(values, release=release, namespace=namespace), namespace
        )

    pool_a = shard("a", "gpuctl-a")
    assert {kind for kind, _, _ in pool_a} >= {
        "ClusterRole",
        "ClusterRoleBinding",
        "Namespace",
        "Role",
        "RoleBinding",
        "SecurityContextConstraints",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    assert not pool_a & shard("b", "gpuctl-b")
    # Each is named after the release (its namespace aside): one release name twice collides.
    assert {o for o in pool_a if o[0] != "Namespace"} <= shard("b", "gpuctl-a")


@pytest.mark.parametrize("openshift", [False, True])
@pytest.mark.parametrize("tls_secret", ["", "my-tls"])
@pytest.mark.parametrize("allow_node_changes", [False, True])
@pytest.mark.parametrize("sharded", [False, True])
def test_the_rendered_flags_parse(
    helm: Helm,
    tmp_path: Path,
    *,
    openshift: bool,
    tls_secret: str,
    allow_node_changes: bool,
    sharded: bool,
) -> None:
    """Both programs accept every flag the chart passes, in every combination."""
    rendered = helm.template(
        {
            "openshift": {"enabled": openshift},
            "coordinator": {"grpc": {"tlsSecret": tls_secret}, "gpudriverSelector": "team=a"},
            "agent": {"allowNodeChanges": allow_node_changes},
            "shard": {"nodeSelector": SHARD if sharded else {}},
        }
    )
    coordinator_args = [mounted(a, tmp_path) for a in args_of(rendered, "Deployment")]
    args = parse_args(coordinator_args)
    assert args.namespace == "gpuctl-system"
    assert args.lease_name == "gpuctl-coordinator"
    server = args.live_nodes.server
    # The coordinator's own Secret (selfSigned), or the mounted files of the named one.
    assert (server.managed_tls is None, server.tls is None) == (bool(tls_secret), not tls_secret)
    assert (args.module_loader_service_account is not None) is openshift
    assert args.node_selector == ("gpuctl.dev/pool=a" if sharded else None)
    agent = container(rendered, "DaemonSet")
    assert agent["command"] == ["gpuctl-agent", "run"]
    agent_args = build_agent_parser().parse_args([agent["command"][1], *agent["args"]])
    assert agent_args.allow_node_changes is allow_node_changes


def mounted(arg: str, folder: Path) -> str:
    """A flag naming a file the Pod mounts, pointed at a stand-in file in `folder`."""
    flag, _, value = arg.partition("=")
    if flag in ("--tls-cert-file", "--tls-key-file"):
        stand_in = folder / Path(value).name
        stand_in.write_text("mounted from the Secret")
        return f"{flag}={stand_in}"
    return arg
