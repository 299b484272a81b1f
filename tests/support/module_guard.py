"""The chart's Module delete guard installed on the test API server, for one test namespace.

`installed_guard` POSTs coordinator/policies/module_guard.py's objects (the ones hack/generate.py
writes into the chart) with the test's names; it is enforced once a dry-run DELETE of a guarded
Module by someone other than the coordinator is refused (testbed/harness/admission_policies.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from coordinator.kube.client import Kube, KubeError, path
from coordinator.policies.module_guard import guard_objects
from gpuctl.common import names
from testbed.harness.admission_policies import installed_policy, refusal


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
    return refusal(
        lambda: kube.request(
            "DELETE", module_path(namespace, module), query={"dryRun": "All"} if dry_run else None
        )
    )


@contextlib.contextmanager
def installed_guard(
    admin: Kube, namespace: str, coordinator_username: str, *, probe: Kube, probe_module: str
) -> Iterator[list[dict[str, object]]]:
    """The guard for `namespace` letting `coordinator_username` through, enforced once a
    dry-run DELETE of `probe_module` (an existing gpuctl Module) as `probe` is refused."""
    objects = guard_objects(guard_name(namespace), namespace, coordinator_username)
    with installed_policy(
        admin, objects, lambda: refused_delete(probe, namespace, probe_module, dry_run=True)
    ):
        yield objects
