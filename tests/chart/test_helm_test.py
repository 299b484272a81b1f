"""The chart's `helm test` (charts/gpuctl/templates/tests/coordinator-and-agents.yaml), as rendered:
hooks only, a command gpuctl's own parser takes, pointed at the coordinator's Service with the CA
the agents trust, as an account that may read GPUNodes and nothing else. The integration test
`tests/integration/chart/test_helm_test.py` runs it with `helm test` against a real coordinator and
agent."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.live_nodes.access.access_review import access_review_body
from coordinator.live_nodes.access.identity import Reviewed
from gpuctl.cli.main import build_parser
from gpuctl.common import names
from tests.support.helm import Helm, find

RELEASE = "gpuctl"
FULLNAME = "gpuctl"  # a release named after the chart is not repeated
NAMESPACE = "gpuctl-system"


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(tmp_path_factory.mktemp("helm"))


def hooks(rendered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        obj
        for obj in rendered
        if (obj["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"
    ]


def test_the_test_reads_the_coordinators_node_service_and_requires_an_agent(helm: Helm) -> None:
    rendered = helm.template()
    made = hooks(rendered)
    assert sorted(o["kind"] for o in made) == [
        "ClusterRole", "ClusterRoleBinding", "Pod", "ServiceAccount"
    ]  # fmt: skip
    pod = find(made, "Pod")["spec"]
    container = pod["containers"][0]
    args = build_parser().parse_args([*container["command"][1:], *container["args"]])
    assert args.coordinator == f"{FULLNAME}-coordinator.{NAMESPACE}.svc:9443"
    assert args.require_reporting == 1
    assert str(args.token_file) == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    # The CA the agents are given, from the same volume definition.
    agent = find(rendered, "DaemonSet")["spec"]["template"]["spec"]
    ca = next(v for v in agent["volumes"] if v["name"] == "coordinator-ca")
    assert pod["volumes"] == [ca]
    assert str(args.ca_file) == "/etc/gpuctl/ca/ca.crt"
    assert (
        container["image"]
        == find(rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    )
    assert pod["restartPolicy"] == "Never"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_its_account_may_read_gpunodes_and_nothing_else(helm: Helm) -> None:
    made = hooks(helm.template())
    rules = find(made, "ClusterRole")["rules"]
    assert rules == [
        {"apiGroups": [names.GROUP], "resources": ["gpunodes"], "verbs": ["get", "list"]}
    ]
    # Exactly what NodeService asks the API server about its caller.
    user = Reviewed(authenticated=True, username="u", uid="1")
    attributes = access_review_body(user, "list", None)["spec"]["resourceAttributes"]
    assert (attributes["group"], attributes["resource"]) == (names.GROUP, names.GPUNODE_PLURAL)
    binding = find(made, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": f"{FULLNAME}-test", "namespace": NAMESPACE}
    ]


def test_it_can_be_left_out_or_ask_for_more_agents(helm: Helm) -> None:
    assert hooks(helm.template({"helmTest": {"enabled": False}})) == []
    pod = find(hooks(helm.template({"helmTest": {"requireReportingAgents": 12}})), "Pod")
    assert "--require-reporting=12" in pod["spec"]["containers"][0]["args"]


def test_the_test_objects_are_the_charts_only_hooks(helm: Helm) -> None:
    """docs/gitops.md's promise: Argo CD maps only install/upgrade hooks to its phases, so the
    `test` hooks are neither applied nor pruned by it; any other hook in the chart would run in
    a PreSync or PostSync phase there. With every optional part on, the only hooks are tests."""
    rendered = helm.template({"networkPolicy": {"enabled": True}, "openshift": {"enabled": True}})
    annotated = {
        (o["kind"], o["metadata"]["name"]): o["metadata"]["annotations"]["helm.sh/hook"]
        for o in rendered
        if "helm.sh/hook" in (o["metadata"].get("annotations") or {})
    }
    assert annotated, "the chart renders no helm test"
    assert set(annotated.values()) == {"test"}, annotated
