"""`helm lint --strict` passes, and values.schema.json makes helm refuse a typo'd or invalid
value with a message naming it, instead of rendering something the user did not mean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.helm import CHART, Helm, HelmError, objects


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(tmp_path_factory.mktemp("helm"))


def test_helm_reports_its_real_version(helm: Helm, tmp_path: Path) -> None:
    """hack/helm/ensure's ldflags: the release, and the Kubernetes version of the client-go
    helm is built with (helm falls back to 1.20 without them, and `helm template` would refuse
    the chart's kubeVersion >= 1.31)."""
    assert helm.run("version", "--template", "{{ .Version }}").startswith("v3.22.")
    probe = tmp_path / "probe"
    (probe / "templates").mkdir(parents=True)
    (probe / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.0.1\n")
    (probe / "templates" / "version.yaml").write_text(
        "kind: ConfigMap\nkubeVersion: {{ .Capabilities.KubeVersion.Version | quote }}\n"
    )
    rendered = objects(helm.run("template", "probe", str(probe)))
    assert rendered[0]["kubeVersion"] == "v1.37.0"
    assert objects(helm.run("template", "gpuctl", str(CHART)))


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["--set", "openshift.enabled=true"],
        ["--set", "podSecurity.labelNamespace=true", "--set", "agent.allowNodeChanges=true"],
        ["--set", "shard.nodeSelector.pool=a", "--set", "coordinator.gpudriverSelector=pool=a"],
        ["--set", "crds.upgrade=true"],
        ["--set", "crds.upgrade=true", "--set", "openshift.enabled=true"],
        [
            f"--set={setting}"
            for setting in (
                "fullnameOverride=xe-fleet",
                "agent.updateStrategy.type=OnDelete",
                "agent.extraArgs[0]=--backoff-max=120",
                "agent.podLabels.team=a",
                "coordinator.extraEnv[0].name=HTTPS_PROXY",
                "coordinator.extraEnv[0].value=http://proxy:3128",
                "coordinator.podAnnotations.owner=gpu-team",
                "coordinator.serviceAccount.annotations.owner=gpu-team",
            )
        ],
    ],
)
def test_lint_strict(helm: Helm, values: list[str]) -> None:
    output = helm.run("lint", "--strict", str(CHART), *values)
    assert "1 chart(s) linted, 0 chart(s) failed" in output


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("coordinator.replica=3", "replica"),  # typo of replicas
        ("agent.gpuNodeLabel=x", "gpuNodeLabel"),  # typo of gpuNodeLabels
        ("openshift.enable=true", "enable"),  # typo of enabled
        ("coordinator.replicas=two", "replicas"),
        ("coordinator.logLevel=verbose", "logLevel"),
        ("agent.image.digest=latest", "digest"),
        ("coordinator.grpc.port=70000", "port"),
        ("agent.allowNodeChanges=maybe", "allowNodeChanges"),
        ("global.imagePullSecrets[0]=regcred", "imagePullSecrets"),
        ("shard.nodeSelectors.pool=a", "nodeSelectors"),  # typo of nodeSelector
        ("shard.nodeSelector.pool=true", "pool"),  # a label value is a string: --set-string
        ("crds.upgrade=yes", "upgrade"),
        ("crds.image.tag=", "tag"),  # kubectl's, not the chart's appVersion
        ("crds.hook=true", "hook"),
        ("fullnameOverride=Fleet_A", "fullnameOverride"),  # not a DNS label
        ("fullnameOverride=" + "a" * 44, "fullnameOverride"),  # + -coordinator-metrics > 63
        ("nameOverride=xe.", "nameOverride"),
        ("agent.updateStrategy.type=Recreate", "type"),  # a Deployment's
        ("agent.updateStrategy.rollingUpdate.maxUnavailable=0", "maxUnavailable"),
        ("agent.updateStrategy.rollingUpdate.maxUnavailable=150%", "maxUnavailable"),
        ("agent.updateStrategy.rollingUpdate.maxSurge=1", "maxSurge"),  # both need host ports
        ("agent.extraArgs=--backoff-max=120", "extraArgs"),  # a list
        ("coordinator.extraEnv[0].value=x", "name"),
        ("coordinator.podLabels.team=7", "team"),  # a label value is a string
        ("agent.podAnnotations=x", "podAnnotations"),
        ("agent.serviceAccount.annotations.owner=true", "owner"),
        ("openshift.moduleLoader.serviceAccount.name=x", "name"),
    ],
)
def test_an_invalid_value_is_refused(helm: Helm, setting: str, named: str) -> None:
    with pytest.raises(HelmError) as refused:
        helm.run("template", "gpuctl", str(CHART), "--set", setting)
    assert "values don't meet the specifications of the schema" in refused.value.stderr
    assert named in refused.value.stderr


def test_every_default_value_is_typed_by_the_schema() -> None:
    """No value escapes the schema: each default's path is a schema property."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(value: object, node: dict[str, object], where: str) -> None:
        assert "type" in node, f"{where} has no type in values.schema.json"
        properties = node.get("properties")
        if isinstance(value, dict) and isinstance(properties, dict):
            for key, child in value.items():
                assert key in properties, f"{where}.{key} is not in values.schema.json"
                walk(child, properties[key], f"{where}.{key}")

    walk(values, schema, "values")
