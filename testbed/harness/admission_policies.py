"""Installs one of gpuctl's admission guards (a ValidatingAdmissionPolicy and its binding) on
the test API server, waits until it is enforced, and removes it afterwards.

"Enforced" is seen, not assumed: the caller's `refused` probe (a dry-run request the guard must
refuse) has to come back refused, and the API server must have type-checked the policy's
current generation without warnings (it loads policies through an informer, so a fresh policy
takes a moment).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from coordinator.kube.client import Kube, KubeError, path
from testbed.harness.waiting import wait_until

ADMISSION = ("admissionregistration.k8s.io", "v1")
POLICIES = "validatingadmissionpolicies"
BINDINGS = "validatingadmissionpolicybindings"


def refusal(request: Callable[[], object]) -> KubeError | None:
    """Runs `request`: the API server's 403, or None if it was accepted."""
    try:
        request()
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
def installed_policy(
    admin: Kube, objects: list[dict[str, Any]], refused: Callable[[], KubeError | None]
) -> Iterator[list[dict[str, Any]]]:
    """`objects` (a policy and its binding, one name) installed and enforced: `refused()`
    returns the refusal of a request the policy must refuse."""
    policy, binding = objects
    name = policy["metadata"]["name"]
    for plural, body in ((POLICIES, policy), (BINDINGS, binding)):
        try:
            admin.request("POST", path(*ADMISSION, plural), body=body)
        except KubeError as err:
            raise AssertionError(f"the API server refused {name}: {err.message}") from err
    try:
        wait_until(f"the API server enforces {name}", refused, timeout_seconds=60)
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
