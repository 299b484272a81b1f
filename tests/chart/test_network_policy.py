"""The chart's opt-in NetworkPolicy around the coordinator: it selects the coordinator's Pods
and no other, lets in only the gRPC and metrics ports, and lets out only DNS, the API server,
the listed Prometheus servers and the admin's extra rules. (Enforcement is the CNI's: the
integration test `tests/integration/chart/test_install.py` has the API server accept it.)"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.helm import Helm, find, kinds

NODES = [{"ipBlock": {"cidr": "10.0.0.0/16"}}]
MONITORING = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}}}]


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(tmp_path_factory.mktemp("helm"))


def ports(rule: dict[str, Any]) -> set[tuple[str, int]]:
    return {(p["protocol"], p["port"]) for p in rule["ports"]}


def test_there_is_none_unless_asked(helm: Helm) -> None:
    assert "NetworkPolicy" not in kinds(helm.template())


def test_it_selects_the_coordinator_and_opens_only_its_two_ports(helm: Helm) -> None:
    rendered = helm.template(
        {
            "networkPolicy": {"enabled": True},
            "coordinator": {"grpc": {"port": 19443}, "metricsPort": 19090},
        }
    )
    policy = find(rendered, "NetworkPolicy")["spec"]
    selector = policy["podSelector"]["matchLabels"]
    coordinator = find(rendered, "Deployment")["spec"]["template"]["metadata"]["labels"]
    agent = find(rendered, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= coordinator.items()
    assert not selector.items() <= agent.items()
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    # Each port from any source by default (agents' tokens still guard the streams).
    assert [ports(rule) for rule in policy["ingress"]] == [{("TCP", 19443)}, {("TCP", 19090)}]
    assert not any("from" in rule for rule in policy["ingress"])
    dns, api = policy["egress"]
    assert ports(dns) == {(proto, port) for proto in ("UDP", "TCP") for port in (53, 5353)}
    assert ports(api) == {("TCP", 443), ("TCP", 6443)}
    assert "to" not in dns
    assert "to" not in api


def test_sources_and_destinations_are_the_admins(helm: Helm) -> None:
    extra = {"to": [{"ipBlock": {"cidr": "192.0.2.0/24"}}], "ports": [{"port": 8443}]}
    rendered = helm.template(
        {
            "networkPolicy": {
                "enabled": True,
                "grpcFrom": NODES,
                "metricsFrom": [*MONITORING, *NODES],
                "apiServer": {"to": [{"ipBlock": {"cidr": "172.16.0.10/32"}}], "ports": [6443]},
                "prometheus": {"to": MONITORING, "ports": [9091]},
                "extraEgress": [extra],
            }
        }
    )
    policy = find(rendered, "NetworkPolicy")["spec"]
    assert [rule["from"] for rule in policy["ingress"]] == [NODES, [*MONITORING, *NODES]]
    _, api, prometheus, added = policy["egress"]
    assert api["to"] == [{"ipBlock": {"cidr": "172.16.0.10/32"}}]
    assert ports(api) == {("TCP", 6443)}
    assert (prometheus["to"], ports(prometheus)) == (MONITORING, {("TCP", 9091)})
    assert added == extra
