"""Where one local control plane keeps its files, and which loopback ports it uses.

Everything of a cluster lives under one root folder, so removing that folder removes the
cluster; ``state.json`` in it lets ``hack/cluster down`` find a cluster that ``up`` started.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Ports:
    """The loopback TCP ports of one control plane."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int


@dataclass(frozen=True)
class Layout:
    """The files of one control plane under ``root``."""

    root: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def controller_manager_certs(self) -> Path:
        return self.root / "kcm-serving"

    @property
    def ca_cert(self) -> Path:
        return self.pki / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.pki / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.pki / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.pki / "apiserver.key"

    @property
    def sa_signing_key(self) -> Path:
        return self.pki / "sa.key"

    @property
    def sa_public_key(self) -> Path:
        return self.pki / "sa.pub"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    @property
    def controller_manager_kubeconfig(self) -> Path:
        return self.root / "kube-controller-manager.kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def audit_policy(self) -> Path:
        return self.root / "audit-policy.yaml"

    @property
    def audit_log(self) -> Path:
        """JSON lines: the API server's audit events of ServiceAccounts' requests."""
        return self.logs / "audit.jsonl"

    def log_file(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def client_cert(self, name: str) -> Path:
        return self.pki / f"{name}.crt"

    def client_key(self, name: str) -> Path:
        return self.pki / f"{name}.key"
