"""The chart's Module delete guard installed on the test API server, for one test namespace.

`installed_guard` POSTs coordinator/module_guard.py's objects (the ones hack/generate.py writes
into the chart) with the test's names, waits until the API server enforces them, and removes
them afterwards. "Enforced" is seen, not assumed: a dry-run DELETE of a guarded Module by
someone other than the coordinator must be refused (the API server loads policies through an
informer, so a fresh policy takes a moment).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from coordinator.kube.client import Kube, KubeError, path
from coordinator.module_guard import guard_objects
from gpuctl.common import names
from tests.harness.waiting import wait_until

ADMISSION = ("admissionregistration.k8s.io", "v1")
POLICIES = "validatingadmissionpolicies"
BINDINGS = "validatingadmissionpolicybindings"


def guard_name(namespace: str) -> str:
    return f"{namespace}-module-delete-guard"


def module_path(namespace: str, name: str | None = None) -> str:
    return path(
        names.KMM_GROUP, names.KMM_VERSION, names.KMM_MODULE_PLURAL, namespace=namespace, name=name
    )


def refused_delete(
    kube: Kube, namespace: str, module: str, *, dry_run: bool = False
) -> KubeError | None:
    """DELETE the Module as `kube`'s user: the refusal, or None if it was accepted."""
    try:
        kube.request(
            "DELETE", module_path(namespace, module), query={"dryRun": "All"} if dry_run else None
        )
    except KubeError as err:
        if err.status == 403:
            return err
        raise
    return None


def type_checked(admin: Kube, name: str) -> dict[str, Any] | None:
    """The policy's status once the API server has type-checked its current generation."""
    policy = admin.request("GET", path(*ADMISSION, POLICIES, name=name))
    status = policy.get("status") or {}
    if status.get("observedGeneration") != policy["metadata"].get("generation"):
        return None
    return dict(status)


@contextlib.contextmanager
def installed_guard(
    admin: Kube, namespace: str, coordinator_username: str, *, probe: Kube, probe_module: str
) -> Iterator[list[dict[str, object]]]:
    """The guard for `namespace` letting `coordinator_username` through, enforced once a
    dry-run DELETE of `probe_module` (an existing gpuctl Module) as `probe` is refused."""
    name = guard_name(namespace)
    objects = guard_objects(name, namespace, coordinator_username)
    policy, binding = objects
    for plural, body in ((POLICIES, policy), (BINDINGS, binding)):
        try:
            admin.request("POST", path(*ADMISSION, plural), body=body)
        except KubeError as err:
            raise AssertionError(f"the API server refused the guard: {err.message}") from err
    try:
        wait_until(
            f"the API server enforces {name}",
            lambda: refused_delete(probe, namespace, probe_module, dry_run=True),
            timeout_seconds=60,
        )
        checked = wait_until(
            f"the API server type-checked {name}",
            lambda: type_checked(admin, name),
            timeout_seconds=60,
        )
        assert not checked.get("typeChecking", {}).get("expressionWarnings"), checked
        yield objects
    finally:
        for plural in (BINDINGS, POLICIES):
            with contextlib.suppress(KubeError):
                admin.request("DELETE", path(*ADMISSION, plural, name=name))
