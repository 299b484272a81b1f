"""The usual knobs of both components: podLabels and podAnnotations on the Pods, extraEnv after
the chart's variables, extraArgs after the chart's flags (which the programs still parse),
ServiceAccount annotations, and the agent's updateStrategy. None may take away what the chart
relies on: a selector label, the leader's serving label, a variable the program reads."""

from __future__ import annotations

from typing import Any

import pytest

from agent.__main__ import build_parser as build_agent_parser
from coordinator.main import parse_args
from tests.chart.test_render import Rendered, args_of, container
from tests.support.helm import Helm, HelmError, find

KINDS = ("Deployment", "DaemonSet")
COMPONENT = {"Deployment": "coordinator", "DaemonSet": "agent"}
KNOBS: dict[str, Any] = {
    "coordinator": {
        "podLabels": {"team": "gpu"},
        "podAnnotations": {"example.com/scrape": "no"},
        "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy.example.com:3128"}],
        "extraArgs": ["--resync-period=120"],
        "serviceAccount": {"annotations": {"example.com/role": "coordinator"}},
    },
    "agent": {
        "podLabels": {"team": "gpu"},
        "podAnnotations": {"example.com/scrape": "no"},
        "extraEnv": [
            {"name": "GRPC_TRACE", "value": "tcp"},
            {"name": "ZONE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ],
        "extraArgs": ["--backoff-max=120"],
        "serviceAccount": {"annotations": {"example.com/role": "agent"}},
    },
    "openshift": {
        "enabled": True,
        "moduleLoader": {"serviceAccount": {"annotations": {"example.com/role": "loader"}}},
    },
}


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(tmp_path_factory.mktemp("helm"))


def pod_metadata(rendered: Rendered, kind: str) -> dict[str, Any]:
    metadata: dict[str, Any] = find(rendered, kind)["spec"]["template"]["metadata"]
    return metadata


def account_annotations(rendered: Rendered, suffix: str) -> dict[str, str] | None:
    metadata: dict[str, dict[str, str]] = find(rendered, "ServiceAccount", suffix)["metadata"]
    return metadata.get("annotations")


def test_by_default_nothing_is_added(helm: Helm) -> None:
    rendered = helm.template({"openshift": {"enabled": True}})
    for kind in KINDS:
        selector = find(rendered, kind)["spec"]["selector"]["matchLabels"]
        assert pod_metadata(rendered, kind) == {"labels": selector}
    assert [e["name"] for e in container(rendered, "Deployment")["env"]] == [
        "POD_NAME",
        "GPUCTL_MEMORY_LIMIT_BYTES",
    ]
    assert [e["name"] for e in container(rendered, "DaemonSet")["env"]] == ["NODE_NAME"]
    for suffix in ("-coordinator", "-agent", "-module-loader"):
        assert account_annotations(rendered, suffix) is None
    assert find(rendered, "DaemonSet")["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "10%"},
    }


def test_each_knob_renders_where_it_says(helm: Helm) -> None:
    default = helm.template({"openshift": {"enabled": True}})
    rendered = helm.template(KNOBS)
    for kind in KINDS:
        values = KNOBS[COMPONENT[kind]]
        selector = find(rendered, kind)["spec"]["selector"]["matchLabels"]
        assert pod_metadata(rendered, kind) == {
            "labels": {**selector, **values["podLabels"]},
            "annotations": values["podAnnotations"],
        }
        # After the chart's own, which stay as they were.
        assert (
            container(rendered, kind)["env"] == container(default, kind)["env"] + values["extraEnv"]
        )
        assert args_of(rendered, kind) == args_of(default, kind) + values["extraArgs"]
    assert parse_args(args_of(rendered, "Deployment")).resync_period == 120
    agent = container(rendered, "DaemonSet")
    assert build_agent_parser().parse_args([agent["command"][1], *agent["args"]]).backoff_max == 120
    for suffix, component in (("-coordinator", "coordinator"), ("-agent", "agent")):
        assert (
            account_annotations(rendered, suffix)
            == KNOBS[component]["serviceAccount"]["annotations"]
        )
    loader = KNOBS["openshift"]["moduleLoader"]["serviceAccount"]["annotations"]
    assert account_annotations(rendered, "-module-loader") == loader


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        (
            {"rollingUpdate": {"maxUnavailable": 3}},
            {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 3}},
        ),
        # rollingUpdate (here the default's, merged in) is left out: OnDelete takes none.
        ({"type": "OnDelete"}, {"type": "OnDelete"}),
    ],
    ids=["RollingUpdate", "OnDelete"],
)
def test_the_agents_update_strategy(
    helm: Helm, strategy: dict[str, Any], expected: dict[str, Any]
) -> None:
    rendered = helm.template({"agent": {"updateStrategy": strategy}})
    assert find(rendered, "DaemonSet")["spec"]["updateStrategy"] == expected


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"agent": {"podLabels": {"app.kubernetes.io/component": "x"}}},
            "agent.podLabels may not set app.kubernetes.io/component",
        ),
        (
            {"coordinator": {"podLabels": {"app.kubernetes.io/instance": "x"}}},
            "coordinator.podLabels may not set app.kubernetes.io/instance",
        ),
        (
            # The gRPC Service would send agents to the standby too.
            {"coordinator": {"podLabels": {"gpuctl.dev/grpc-serving": "true"}}},
            "coordinator.podLabels may not set gpuctl.dev/grpc-serving",
        ),
        (
            {"agent": {"extraEnv": [{"name": "NODE_NAME", "value": "x"}]}},
            "agent.extraEnv may not set NODE_NAME",
        ),
        (
            {"coordinator": {"extraEnv": [{"name": "POD_NAME", "value": "x"}]}},
            "coordinator.extraEnv may not set POD_NAME",
        ),
    ],
    ids=["agent selector", "coordinator selector", "serving label", "NODE_NAME", "POD_NAME"],
)
def test_what_the_chart_relies_on_cannot_be_overridden(
    helm: Helm, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(HelmError) as refused:
        helm.template(values)
    assert message in refused.value.stderr
