"""The chart's pool move guard installed on the test API server, for one test's pool.

`installed_pool_guard` POSTs coordinator/policies/pool_guard.py's objects (the ones hack/generate.py
writes into the chart for a shard) with the test's names; it is enforced once a dry-run move of
`probe_node` (a node of the pool the rollout has a stake in) out of the pool is refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from coordinator.kube.client import MERGE_PATCH, Kube, KubeError, path
from coordinator.policies.pool_guard import guard_objects, pool_literal
from testbed.harness.admission_policies import installed_policy, refusal


def refused_move(
    kube: Kube,
    node: str,
    labels: dict[str, str | None],
    *,
    annotations: dict[str, str] | None = None,
    dry_run: bool = False,
) -> KubeError | None:
    """Relabel `node` (and annotate it, in the same patch) as `kube`'s user: the refusal, or
    None if accepted."""
    metadata: dict[str, object] = {"labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    return refusal(
        lambda: kube.request(
            "PATCH",
            path("", "v1", "nodes", name=node),
            body={"metadata": metadata},
            content_type=MERGE_PATCH,
            query={"dryRun": "All"} if dry_run else None,
        )
    )


@contextlib.contextmanager
def installed_pool_guard(
    admin: Kube, name: str, pool: dict[str, str], *, probe_node: str, away: dict[str, str | None]
) -> Iterator[list[dict[str, object]]]:
    """The guard of `pool`, enforced once a dry-run relabel of `probe_node` by `away` (which
    takes it out of the pool) is refused."""
    objects = guard_objects(f"{name}-pool-move-guard", pool_literal(pool))
    with installed_policy(
        admin, objects, lambda: refused_move(admin, probe_node, away, dry_run=True)
    ):
        yield objects
