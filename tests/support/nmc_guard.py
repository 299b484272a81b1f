"""The chart's NodeModulesConfig delete guard installed on the test API server, for the gpuctl
Modules of one test namespace.

`installed_nmc_guard` POSTs coordinator/policies/nmc_guard.py's objects (the ones hack/generate.py
writes into the chart) with the test's names; it is enforced once a dry-run DELETE of the
NodeModulesConfig of a node where the namespace's Module is loaded is refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from coordinator.kube.client import Kube, KubeError, path
from coordinator.policies.nmc_guard import guard_objects
from gpuctl.common import names
from testbed.harness.admission_policies import installed_policy, refusal


def nmc_path(node: str) -> str:
    return path(names.KMM_GROUP, names.KMM_VERSION, names.KMM_NODE_CONFIG_PLURAL, name=node)


def refused_nmc_delete(kube: Kube, node: str, *, dry_run: bool = False) -> KubeError | None:
    """DELETE the node's NodeModulesConfig as `kube`'s user: the refusal, or None if accepted."""
    return refusal(
        lambda: kube.request("DELETE", nmc_path(node), query={"dryRun": "All"} if dry_run else None)
    )


@contextlib.contextmanager
def installed_nmc_guard(
    admin: Kube, namespace: str, *, probe: Kube, probe_node: str
) -> Iterator[list[dict[str, object]]]:
    """The guard for `namespace`'s Modules, enforced once a dry-run DELETE of `probe_node`'s
    NodeModulesConfig (one of that namespace's Modules loaded there) as `probe` is refused."""
    objects = guard_objects(f"{namespace}-nmc-delete-guard", namespace)
    with installed_policy(
        admin, objects, lambda: refused_nmc_delete(probe, probe_node, dry_run=True)
    ):
        yield objects
