"""The chart's worker hold guard installed on the test API server, for one test namespace.

`installed_worker_hold_guard` POSTs coordinator/policies/worker_hold_guard.py's objects (the ones
hack/generate.py writes into the chart); it is enforced once a dry-run KMM worker Pod on a node
the namespace's names.KMM_WORKER_HOLDS lists (a probe entry, taken out again) is refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from coordinator.kube.client import MERGE_PATCH, Kube, KubeError, path
from coordinator.policies.worker_hold_guard import guard_objects
from gpuctl.common import names
from gpuctl.rollout.step.worker_hold import held_in
from testbed.harness.admission_policies import installed_policy, refusal
from testbed.harness.waiting import wait_until

PROBE_NODE = "worker-hold-probe"


def held_nodes(kube: Kube, namespace: str) -> set[str]:
    """The nodes the namespace holds KMM's worker off."""
    meta = kube.request("GET", path("", "v1", "namespaces", name=namespace))["metadata"]
    return set(held_in((meta.get("annotations") or {}).get(names.KMM_WORKER_HOLDS)))


def wait_held(kube: Kube, namespace: str, nodes: set[str]) -> None:
    """Waits until the namespace's hold list is `nodes`: the coordinator writes it after the
    pass's node writes (coordinator/rollout/worker_holds.py), so it follows them, not leads."""
    wait_until(
        f"the worker holds {sorted(nodes)}",
        lambda: held_nodes(kube, namespace) == nodes,
        timeout_seconds=30,
    )


def refused_worker_pod(kube: Kube, namespace: str, node: str) -> KubeError | None:
    """A dry-run KMM worker Pod on `node`: the refusal, or None if it was accepted."""
    body = {
        "metadata": {
            "name": f"kmm-worker-{node}-probe",
            "labels": {names.KMM_WORKER_ACTION_LABEL: "Unload"},
        },
        "spec": {"nodeName": node, "containers": [{"name": "worker", "image": "kmm-worker"}]},
    }
    return refusal(
        lambda: kube.request(
            "POST",
            path("", "v1", "pods", namespace=namespace),
            body=body,
            query={"dryRun": "All"},
        )
    )


def _hold_probe(kube: Kube, namespace: str, held: bool) -> None:
    value = PROBE_NODE if held else None
    kube.request(
        "PATCH",
        path("", "v1", "namespaces", name=namespace),
        body={"metadata": {"annotations": {names.KMM_WORKER_HOLDS: value}}},
        content_type=MERGE_PATCH,
    )


@contextlib.contextmanager
def installed_worker_hold_guard(admin: Kube, namespace: str) -> Iterator[list[dict[str, object]]]:
    """The guard of `namespace`'s KMM workers, enforced (seen refusing a probe); call it
    before the coordinator holds a node (the probe's annotation is written whole)."""
    objects = guard_objects(f"{namespace}-kmm-worker-hold", namespace)
    _hold_probe(admin, namespace, held=True)
    with installed_policy(admin, objects, lambda: refused_worker_pod(admin, namespace, PROBE_NODE)):
        _hold_probe(admin, namespace, held=False)
        yield objects
