"""Agents and a running LiveNodes against the real test API server, for integration tests.

- `AgentPods` creates the agent ServiceAccount and one Pod per Node (bound to it by
  spec.nodeName; nothing runs it), and mints TokenRequest tokens bound to those Pods, exactly
  what the DaemonSet's projected token is.
- `running_live_nodes` runs coordinator.live_nodes.live.LiveNodes in the test process.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from kubernetes import client as k8s

from coordinator.kube.client import Kube, KubeError, path
from coordinator.live_nodes.live import LiveNodes, LiveNodesConfig
from coordinator.live_nodes.server import ServerConfig
from coordinator.live_nodes.streams.agent_service import AgentServiceConfig
from gpuctl.common.names import AGENT_AUDIENCE, GROUP, VERSION
from gpuctl.common.names import GPUNODE_PLURAL as PLURAL
from testbed.agent_client import AgentClient
from testbed.harness.access import KubeCluster
from testbed.harness.serving_tls import ServingTls

AGENT_SA = "gpuctl-agent"


def agent_username(namespace: str, service_account: str = AGENT_SA) -> str:
    return f"system:serviceaccount:{namespace}:{service_account}"


@dataclass
class AgentPods:
    """The agent ServiceAccount in `namespace` and a Pod per node, with bound tokens."""

    cluster: KubeCluster
    namespace: str
    admin: Any
    pods: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        core: Any = k8s.CoreV1Api(self.admin)
        for name in (AGENT_SA, "other-sa"):
            core.create_namespaced_service_account(self.namespace, {"metadata": {"name": name}})

    def pod_for(self, node: str, service_account: str = AGENT_SA) -> str:
        """The Pod of `service_account` on `node` (created on first use)."""
        name = f"{service_account}-{node}"[:63].rstrip("-")
        if name in self.pods:
            return name
        core: Any = k8s.CoreV1Api(self.admin)
        core.create_namespaced_pod(
            self.namespace,
            {
                "metadata": {"name": name},
                "spec": {
                    "nodeName": node,
                    "serviceAccountName": service_account,
                    "automountServiceAccountToken": False,
                    "containers": [{"name": "agent", "image": "registry.invalid/gpuctl-agent"}],
                },
            },
        )
        self.pods.append(name)
        return name

    def token(
        self,
        node: str,
        *,
        service_account: str = AGENT_SA,
        audiences: tuple[str, ...] = (AGENT_AUDIENCE,),
    ) -> str:
        """A token of `service_account` bound to its Pod on `node`."""
        pod = self.pod_for(node, service_account)
        return self.cluster.service_account_token(
            self.namespace, service_account, audiences=audiences, bound_pod=pod
        )

    def delete_pods(self) -> None:
        core: Any = k8s.CoreV1Api(self.admin)
        for name in self.pods:
            with contextlib.suppress(Exception):
                core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def resigned_token(cluster: KubeCluster, token: str, *, expires_in: int) -> str:
    """`token` with its times moved so it expires `expires_in` seconds from now (negative:
    already expired), signed again with the cluster's real service-account signing key.

    TokenRequest refuses lifetimes under ten minutes, so this is how a test gets a token that
    is genuine in every way but its expiry.
    """
    header, payload, _ = token.split(".")
    claims = json.loads(_b64url_decode(payload))
    now = int(time.time())
    claims["exp"] = now + expires_in
    claims["iat"] = claims["nbf"] = min(now, claims["exp"]) - 600
    signing_input = f"{header}.{_b64url(json.dumps(claims).encode())}"
    key = serialization.load_pem_private_key(
        cluster.layout.sa_signing_key.read_bytes(), password=None
    )
    assert isinstance(key, rsa.RSAPrivateKey)
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64url(signature)}"


def make_live_nodes(
    cluster: KubeCluster,
    namespace: str,
    tls: ServingTls,
    *,
    freshness: float = 3.0,
    heartbeat: float = 1.0,
    max_reports_per_minute: int = 60,
    inspect_timeout: float = 3.0,
    mirror_min_interval: float = 0.2,
    api_client: Any = None,
    port: int = 0,
    node_selector: str | None = None,
) -> tuple[LiveNodes, Kube, Any]:
    """A LiveNodes not yet started, its Kube and ApiClient (the admin's unless given);
    `port` 0: any free one; `node_selector`: serve only those Nodes (a shard)."""
    api_client = api_client if api_client is not None else cluster.admin_client()
    kube = Kube(api_client)
    config = LiveNodesConfig(
        server=ServerConfig(
            agents=AgentServiceConfig(
                audience=AGENT_AUDIENCE,
                agent_username=agent_username(namespace),
                heartbeat_seconds=heartbeat,
                rescan_seconds=30.0,
                max_reports_per_minute=max_reports_per_minute,
                hello_timeout_seconds=5.0,
            ),
            host="127.0.0.1",
            port=port,
            tls=tls.files,
            report_freshness_seconds=freshness,
        ),
        inspect_timeout_seconds=inspect_timeout,
        mirror_workers=2,
        mirror_min_interval_seconds=mirror_min_interval,
        node_selector=node_selector,
    )
    live = LiveNodes(
        kube,
        config,
        monotonic=time.monotonic,
        wall_clock=lambda: datetime.datetime.now(datetime.UTC),
        epoch_clock=time.time,
    )
    return live, kube, api_client


@contextlib.contextmanager
def running_live_nodes(
    cluster: KubeCluster,
    namespace: str,
    tls: ServingTls,
    *,
    freshness: float = 3.0,
    heartbeat: float = 1.0,
    max_reports_per_minute: int = 60,
    inspect_timeout: float = 3.0,
    mirror_min_interval: float = 0.2,
    api_client: Any = None,
    node_selector: str | None = None,
) -> Iterator[LiveNodes]:
    """LiveNodes as the admin, or as whoever `api_client` authenticates as (closed after)."""
    live, kube, api_client = make_live_nodes(
        cluster,
        namespace,
        tls,
        freshness=freshness,
        heartbeat=heartbeat,
        max_reports_per_minute=max_reports_per_minute,
        inspect_timeout=inspect_timeout,
        mirror_min_interval=mirror_min_interval,
        api_client=api_client,
        node_selector=node_selector,
    )
    live.start()
    try:
        yield live
    finally:
        kube.close()  # ends the GPUNode watch now rather than at its timeout
        live.stop()
        api_client.close()


def connect(live: LiveNodes, tls: ServingTls, token: str | None) -> AgentClient:
    return AgentClient(f"localhost:{live.port}", token=token, root_certificate=tls.ca_pem)


def get_gpunode(kube: Kube, name: str) -> dict[str, Any] | None:
    try:
        return kube.request("GET", path(GROUP, VERSION, PLURAL, name=name))
    except KubeError as err:
        if err.not_found:
            return None
        raise


def delete_gpunode(kube: Kube, name: str) -> None:
    with contextlib.suppress(KubeError):
        kube.request("DELETE", path(GROUP, VERSION, PLURAL, name=name))
