"""The chart's KMM CRD delete guard installed on the test API server, for one test namespace's
gpuctl Modules.

Every DELETE of a CRD here is a dry run: the CRDs are the whole test cluster's, and a guard that
failed to refuse must not take KMM's CRDs from every later test.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from coordinator.kube.client import Kube, KubeError, path
from coordinator.policies.kmm_crd_guard import guard_objects
from testbed.harness.admission_policies import installed_policy, refusal


def refused_crd_delete(kube: Kube, crd: str) -> KubeError | None:
    """A dry-run DELETE of CRD `crd` as `kube`'s user: the refusal, or None if accepted."""
    return refusal(
        lambda: kube.request(
            "DELETE",
            path("apiextensions.k8s.io", "v1", "customresourcedefinitions", name=crd),
            query={"dryRun": "All"},
        )
    )


@contextlib.contextmanager
def installed_crd_guard(
    admin: Kube, namespace: str, *, probe: Kube, probe_crd: str
) -> Iterator[list[dict[str, object]]]:
    """The guard for `namespace`'s gpuctl Modules (one must exist), enforced once a DELETE of
    `probe_crd` as `probe` is refused."""
    objects = guard_objects(f"{namespace}-kmm-crd-delete-guard", namespace)
    with installed_policy(admin, objects, lambda: refused_crd_delete(probe, probe_crd)):
        yield objects
