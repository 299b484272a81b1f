"""Kubeconfig files for the local control plane: one cluster, one client-certificate user."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from testbed.harness.certs import KeyPair

CONTEXT = "gpuctl-local"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig_document(server: str, ca_pem: bytes, user: str, client: KeyPair) -> str:
    """A self-contained kubeconfig (certificates embedded) for ``user`` at ``server``."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CONTEXT,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(client.cert_pem),
                    "client-key-data": _b64(client.key_pem),
                },
            }
        ],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": user}}],
        "current-context": CONTEXT,
        "preferences": {},
    }
    return yaml.safe_dump(document, sort_keys=False)


def write_private(path: Path, data: bytes) -> None:
    """Writes a file only its owner can read (keys, kubeconfigs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_bytes(data)
