"""Writes every certificate and key one local control plane needs into its layout."""

from __future__ import annotations

import datetime

from testbed.harness import certs
from testbed.harness.kubeconfig import kubeconfig_document, write_private
from testbed.harness.layout import Layout

ADMIN_USER = "gpuctl-admin"
ADMIN_GROUPS = ("system:masters",)
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"


def write_pki(layout: Layout, server: str, now: datetime.datetime) -> None:
    """CA, API server serving pair, SA signing keys and the admin and KCM kubeconfigs."""
    ca = certs.make_ca(now)
    write_private(layout.ca_cert, ca.cert_pem)
    write_private(layout.ca_key, ca.key_pem)
    serving = certs.make_serving_cert(ca, now)
    write_private(layout.serving_cert, serving.cert_pem)
    write_private(layout.serving_key, serving.key_pem)
    sa_key = certs.make_service_account_signing_key()
    write_private(layout.sa_signing_key, sa_key)
    write_private(layout.sa_public_key, certs.public_key_pem(sa_key))

    admin = certs.make_client_cert(ca, now, ADMIN_USER, ADMIN_GROUPS)
    write_private(layout.client_cert("admin"), admin.cert_pem)
    write_private(layout.client_key("admin"), admin.key_pem)
    write_private(
        layout.admin_kubeconfig,
        kubeconfig_document(server, ca.cert_pem, ADMIN_USER, admin).encode(),
    )
    kcm = certs.make_client_cert(ca, now, CONTROLLER_MANAGER_USER)
    write_private(
        layout.controller_manager_kubeconfig,
        kubeconfig_document(server, ca.cert_pem, CONTROLLER_MANAGER_USER, kcm).encode(),
    )


def load_ca(layout: Layout) -> certs.KeyPair:
    """The CA of a control plane written by ``write_pki``."""
    return certs.KeyPair(layout.ca_cert.read_bytes(), layout.ca_key.read_bytes())
