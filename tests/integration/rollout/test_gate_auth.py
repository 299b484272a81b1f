"""The Prometheus gate against an authenticated Prometheus, as OpenShift's thanos-querier is:
a real Prometheus behind a TLS proxy that demands a bearer token, reviews it with the real API
server and lets through only users allowed `get prometheuses/api`
(testbed/harness/bearer_proxy.py). The coordinator (a real process) is given a ServiceAccount's
token file and the proxy's CA (--prometheus-token-file, --prometheus-ca-file). A token of an
account without that permission holds the rollout with the proxy's 403 in the status; the
token file rotated to an allowed account's is used from the next query on; then the gate holds
for the firing alert and, once it clears, the nodes roll. Real agents and real KMM throughout.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.kube.client import Kube, path
from testbed.harness.access import KubeCluster
from testbed.harness.bearer_proxy import RESOURCE, bearer_proxy
from testbed.harness.prometheus import FIRING_QUERY, MetricsEndpoint, query, running_prometheus
from testbed.harness.rbac_grants import granted, service_account
from testbed.harness.waiting import wait_until
from testbed.rollout_live.images import NEW, OLD
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import FAST, held_by, module_version, start, wait_status

pytestmark = pytest.mark.integration


@pytest.fixture
def monitoring_reader(
    kube_cluster: KubeCluster, kube_admin: Any, namespace: str
) -> Iterator[tuple[str, str]]:
    """(a token of an account that may query Prometheus, a token of one that may not):
    ServiceAccounts of the test's namespace, the first bound to a ClusterRole granting what
    OpenShift's cluster-monitoring-view grants on prometheuses/api."""
    kube = Kube(kube_admin)
    for account in ("gate-reader", "gate-stranger"):
        kube.request(
            "POST",
            path("", "v1", "serviceaccounts", namespace=namespace),
            body={"metadata": {"name": account}},
        )
    rule = {
        "apiGroups": [RESOURCE["group"]],
        "resources": [f"{RESOURCE['resource']}/{RESOURCE['subresource']}"],
        "verbs": ["get"],
    }
    reader = service_account(namespace, "gate-reader")
    with granted(kube, f"{namespace}-monitoring-view", [rule], reader):
        yield (
            kube_cluster.service_account_token(namespace, "gate-reader"),
            kube_cluster.service_account_token(namespace, "gate-stranger"),
        )


def test_the_gate_asks_a_token_demanding_prometheus_with_the_coordinators_token_file(
    rollout_rig: RolloutRig, monitoring_reader: tuple[str, str], tmp_path: Path
) -> None:
    rig = rollout_rig
    reader, stranger = monitoring_reader
    token_file, ca_file = tmp_path / "prometheus-token", tmp_path / "prometheus-ca.crt"
    token_file.write_text(stranger)
    endpoint = MetricsEndpoint()
    endpoint.value = 1  # a GPU node is degraded: the alert fires
    try:
        with (
            running_prometheus(tmp_path / "prometheus", endpoint.port) as upstream,
            bearer_proxy(rig.kube, upstream, tmp_path / "proxy") as proxy,
        ):
            ca_file.write_bytes(proxy.ca_pem)
            wait_until("the alert fires", lambda: query(upstream, FIRING_QUERY), timeout_seconds=60)
            gate = {"url": proxy.url, "query": FIRING_QUERY}
            flags = [f"--prometheus-token-file={token_file}", f"--prometheus-ca-file={ca_file}"]
            nodes = start(rig, ["a", "b"], {**FAST, "gates": {"prometheus": gate}}, flags)
            new = rig.kmm_version_at(NEW)
            rig.set_version(NEW)
            status = wait_status(rig, "held: the token's user may not", held_by(new, "HTTP 403"))
            assert "the token's user may not query" in status["message"]
            assert "system:serviceaccount:" in status["message"]  # the proxy's words, quoted
            # Nobody starts: each waits Done at the old version (no write until its turn).
            assert [rig.state(n) for n in nodes] == [f"Done {rig.kmm_version_at(OLD)}"] * 2

            token_file.write_text(reader)  # rotated: read at the next query
            wait_status(rig, "held by the alert", held_by(new, "returned 1 series"))
            endpoint.value = 0  # the node recovered: the alert resolves
            rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=120, version=new)
            wait_status(rig, "Complete", lambda s: s.get("state") == "Complete")
        # The proxy refused the stranger and answered the reader; no request came without a
        # token (a 401 would say so).
        assert 403 in proxy.codes()
        assert 200 in proxy.codes()
        assert 401 not in proxy.codes()
        for node in nodes:
            assert module_version(rig, node) == NEW
        assert rig.kernels.violations == []
    finally:
        endpoint.close()
