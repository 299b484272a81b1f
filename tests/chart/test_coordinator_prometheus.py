"""coordinator.prometheus: the bearer token and CA bundle the coordinator sends to GPUDrivers'
Prometheus gates, as mounted files and the flags naming them (which the coordinator's own
parser takes); nothing of it by default; impossible combinations refused with the value named.
tests/integration/rollout/test_gate_auth.py runs the flags against a token-demanding proxy."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.main import parse_args
from tests.support.helm import Helm, HelmError, find

BEARER_FILE_ARG = "--prometheus-token-file=/var/run/secrets/gpuctl/prometheus/token"
CA_FLAG = "--prometheus-ca-file=/etc/gpuctl/prometheus-ca/ca.crt"


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(tmp_path_factory.mktemp("helm"))


def coordinator_pod(helm: Helm, prometheus: dict[str, Any]) -> dict[str, Any]:
    rendered = helm.template({"coordinator": {"prometheus": prometheus}})
    spec: dict[str, Any] = find(rendered, "Deployment")["spec"]["template"]["spec"]
    return spec


def volume(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in pod.get("volumes", []) if v["name"] == name)


def mounts(pod: dict[str, Any]) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in pod["containers"][0].get("volumeMounts", [])}


def test_nothing_is_sent_by_default(helm: Helm) -> None:
    pod = coordinator_pod(helm, {})
    args = pod["containers"][0]["args"]
    assert not any(a.startswith("--prometheus-") for a in args)
    assert "volumes" not in pod


def test_the_coordinators_own_token_and_a_configmap_ca(helm: Helm) -> None:
    pod = coordinator_pod(
        helm,
        {
            "bearerToken": {"source": "serviceAccount", "audience": "thanos"},
            "ca": {"configMap": "openshift-service-ca.crt", "key": "service-ca.crt"},
        },
    )
    args = pod["containers"][0]["args"]
    assert BEARER_FILE_ARG in args
    assert CA_FLAG in args
    [source] = volume(pod, "prometheus-token")["projected"]["sources"]
    assert source["serviceAccountToken"] == {
        "path": "token",
        "expirationSeconds": 3600,
        "audience": "thanos",
    }
    assert volume(pod, "prometheus-ca")["configMap"] == {
        "name": "openshift-service-ca.crt",
        "items": [{"key": "service-ca.crt", "path": "ca.crt"}],
    }
    assert mounts(pod) == {
        "prometheus-token": "/var/run/secrets/gpuctl/prometheus",
        "prometheus-ca": "/etc/gpuctl/prometheus-ca",
    }
    parsed = parse_args(args)
    assert str(parsed.prometheus_token_file) == BEARER_FILE_ARG.partition("=")[2]
    assert str(parsed.prometheus_ca_file) == CA_FLAG.partition("=")[2]


def test_a_secrets_token_and_ca_beside_a_tls_secret(helm: Helm) -> None:
    rendered = helm.template(
        {
            "coordinator": {
                "grpc": {"tlsSecret": "my-tls"},
                "prometheus": {
                    "bearerToken": {"source": "secret", "secret": {"name": "prom", "key": "t"}},
                    "ca": {"secret": "prom-ca"},
                },
            }
        }
    )
    pod = find(rendered, "Deployment")["spec"]["template"]["spec"]
    assert volume(pod, "prometheus-token")["secret"] == {
        "secretName": "prom",
        "items": [{"key": "t", "path": "token"}],
    }
    assert volume(pod, "prometheus-ca")["secret"]["secretName"] == "prom-ca"
    assert set(mounts(pod)) == {"grpc-tls", "prometheus-token", "prometheus-ca"}
    assert volume(pod, "grpc-tls")["secret"]["secretName"] == "my-tls"


@pytest.mark.parametrize(
    ("prometheus", "words"),
    [
        (
            {"bearerToken": {"source": "secret"}},
            "coordinator.prometheus.bearerToken.source=secret needs "
            "coordinator.prometheus.bearerToken.secret.name",
        ),
        ({"ca": {"configMap": "a", "secret": "b"}}, "set configMap or secret, not both"),
        ({"bearerToken": {"source": "file"}}, "source"),
    ],
)
def test_what_cannot_work_is_refused_naming_the_value(
    helm: Helm, prometheus: dict[str, Any], words: str
) -> None:
    with pytest.raises(HelmError, match=words):
        helm.template({"coordinator": {"prometheus": prometheus}})
