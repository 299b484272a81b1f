"""Command lines of etcd, kube-apiserver and kube-controller-manager for a local control plane.

Pure functions of a ``Layout`` and ``Ports``. The API server flags are envtest's (loopback
etcd, secure port with a test CA, a service CIDR that nothing listens on) plus what a real
cluster has and envtest leaves out:

- ``Node,RBAC`` authorization (as kubeadm sets it) and the default admission plugins plus
  ``NodeRestriction``. ``TaintNodesByCondition`` is disabled: it taints every new Node
  ``node.kubernetes.io/not-ready:NoSchedule``, and only a kubelet's heartbeat (through the
  node-lifecycle controller, which would also mark kubelet-less Nodes unreachable) removes it.
- A service-account issuer with a signing key, so TokenRequest and TokenReview work; bound
  tokens of Pods on a Node carry the node name (ServiceAccountTokenPodNodeInfo, GA and locked
  on since Kubernetes 1.32).
- ``--endpoint-reconciler-type=none``: the ``kubernetes`` Service's endpoints would name
  127.0.0.1, which Endpoints validation rejects.
- ``OwnerReferencesPermissionEnforcement`` (on in OpenShift): setting an owner reference needs
  `delete` on the object, and blockOwnerDeletion `update` on the owner's finalizers, so a test
  running as the coordinator's ServiceAccount finds any such grant the chart lacks.
- An audit log (``AUDIT_POLICY``): every request of a ServiceAccount outside kube-system, at
  Metadata level (who, verb, resource, answer code), so a test can compare what the
  coordinator called with what the chart grants it.

kube-controller-manager runs only controllers that work without kubelets, among them the
garbage collector, the namespace controller and both service-account controllers.
"""

from __future__ import annotations

from pathlib import Path

from testbed.harness.layout import LOOPBACK, Layout, Ports

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
ETCD_MEMBER_NAME = "default"

CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "legacy-serviceaccount-token-cleaner-controller",
    # Type-checks ValidatingAdmissionPolicies against the schemas (status.typeChecking), so a
    # test sees a CEL expression that does not fit the Module schema (the Module delete guard).
    "validatingadmissionpolicy-status-controller",
)


def etcd_url(port: int) -> str:
    return f"http://{LOOPBACK}:{port}"


def apiserver_url(ports: Ports) -> str:
    return f"https://{LOOPBACK}:{ports.apiserver}"


def etcd_args(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    client = etcd_url(ports.etcd_client)
    peer = etcd_url(ports.etcd_peer)
    return [
        str(binary),
        f"--name={ETCD_MEMBER_NAME}",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster={ETCD_MEMBER_NAME}={peer}",
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]


def apiserver_args(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    return [
        str(binary),
        f"--etcd-servers={etcd_url(ports.etcd_client)}",
        f"--bind-address={LOOPBACK}",
        f"--advertise-address={LOOPBACK}",
        f"--secure-port={ports.apiserver}",
        f"--cert-dir={layout.pki}",
        f"--tls-cert-file={layout.serving_cert}",
        f"--tls-private-key-file={layout.serving_key}",
        f"--client-ca-file={layout.ca_cert}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--allow-privileged=true",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction,OwnerReferencesPermissionEnforcement",
        "--disable-admission-plugins=TaintNodesByCondition",
        f"--service-account-issuer={apiserver_url(ports)}",
        f"--service-account-key-file={layout.sa_public_key}",
        f"--service-account-signing-key-file={layout.sa_signing_key}",
        "--endpoint-reconciler-type=none",
        "--profiling=false",
        f"--audit-policy-file={layout.audit_policy}",
        f"--audit-log-path={layout.audit_log}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
    ]


# Written to layout.audit_policy. The controllers' ServiceAccounts (kube-system) are many and
# busy; only the tests' ServiceAccounts are recorded, once each, when the answer is complete.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    userGroups: ["system:serviceaccounts:kube-system"]
  - level: Metadata
    userGroups: ["system:serviceaccounts"]
  - level: None
"""


def controller_manager_args(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={layout.controller_manager_kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports.controller_manager}",
        f"--cert-dir={layout.controller_manager_certs}",
        "--leader-elect=false",
        f"--controllers={','.join(CONTROLLERS)}",
        f"--service-account-private-key-file={layout.sa_signing_key}",
        f"--root-ca-file={layout.ca_cert}",
        "--use-service-account-credentials=true",
        "--profiling=false",
    ]
