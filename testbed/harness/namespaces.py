"""Deleting a test's namespace where a shared KMM webhook still watches namespaces.

KMM's webhook refuses to delete a namespace labelled ``kmm.node.k8s.io/contains-modules``
(KMM v2.6.0 internal/webhook/namespace.go ``ValidateDelete``); KMM's manager takes the label
off only when it finalizes the namespace's last Module (module_reconciler.go
``tryRemovingLabel``), which a test's teardown skips by taking KMM's finalizers off itself
(``RealKmm.close``). With the control plane's shared webhook still registered
(testbed/harness/shared_kmm.py), ``delete_test_namespace`` takes the label off, as an admin
cleaning up would, and deletes again until the API server accepts.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from testbed.harness.kmm_webhook import NAMESPACE_LABEL
from testbed.harness.waiting import wait_until

REFUSAL = "namespace contains one or more Module resources"
HTTP_NOT_FOUND = 404
DELETE_TIMEOUT_SECONDS = 30.0


def delete_test_namespace(core: Any, name: str) -> None:
    """Deletes namespace ``name`` (gone already is fine), past KMM's refusal of a labelled one."""

    def deleted() -> bool:
        try:
            core.delete_namespace(name)
        except k8s.ApiException as error:
            if error.status == HTTP_NOT_FOUND:
                return True
            if REFUSAL not in str(error.body):
                raise
            core.patch_namespace(name, {"metadata": {"labels": {NAMESPACE_LABEL: None}}})
            return False
        return True

    wait_until(
        f"namespace {name} accepted for deletion (KMM's label taken off)",
        deleted,
        timeout_seconds=DELETE_TIMEOUT_SECONDS,
        interval_seconds=0.2,
    )
