"""kured's side of its reboot lock, as a kured Pod takes and lets go of it, for the tests.

kured itself is not in the test bed: `go install github.com/kubereboot/kured/cmd/kured@...`
is refused by the Go module proxy here (403, "This module version is not available"). What
stands in is only its lock, as kured's pkg/daemonsetlock does it with `--concurrency 1`:
`acquire` reads the DaemonSet and, where no live holder is there, writes its own
`{"nodeID","metadata":{"unschedulable"},"created","TTL"}` with an Update carrying the
resourceVersion read (a conflict is read again); where one is, it is refused and says who
holds it. `release` takes its own off. Nothing of gpuctl's is used to decide.
"""

from __future__ import annotations

import datetime
import json

from coordinator.kube.client import Kube, KubeError, path

ANNOTATION = "weave.works/kured-node-lock"
CONFLICT = 409


def daemon_set(kube: Kube, namespace: str, name: str = "kured") -> None:
    """kured's DaemonSet, as its manifest makes it (no controller runs its Pods here)."""
    labels = {"name": name}
    kube.request(
        "POST",
        path("apps", "v1", "daemonsets", namespace=namespace),
        body={
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"gpuctl.test/no-such-node": "true"},
                        "containers": [{"name": "kured", "image": "ghcr.io/kubereboot/kured"}],
                    },
                },
            },
        },
    )


def _ttl_live(holder: dict[str, object], now: datetime.datetime) -> bool:
    ttl = int(str(holder.get("TTL") or 0))
    if ttl <= 0:
        return True
    created = datetime.datetime.fromisoformat(str(holder["created"]).replace("Z", "+00:00")[:26])
    created = created.replace(tzinfo=datetime.UTC) if created.tzinfo is None else created
    return (now - created).total_seconds() * 1e9 < ttl


def acquire(kube: Kube, namespace: str, node: str, name: str = "kured") -> tuple[bool, str]:
    """(taken, the holder's nodeID), as kured's DaemonSetSingleLock.Acquire answers."""
    where = path("apps", "v1", "daemonsets", namespace=namespace, name=name)
    while True:
        found = kube.request("GET", where)
        annotations = found["metadata"].get("annotations") or {}
        now = datetime.datetime.now(datetime.UTC)
        if ANNOTATION in annotations:
            holder = json.loads(annotations[ANNOTATION])
            if _ttl_live(holder, now):
                return holder["nodeID"] == node, str(holder["nodeID"])
        value = {
            "nodeID": node,
            "metadata": {"unschedulable": False},
            "created": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "TTL": 0,
        }
        found["metadata"].setdefault("annotations", {})[ANNOTATION] = json.dumps(value)
        try:
            kube.request("PUT", where, body=found)
        except KubeError as err:
            if err.status == CONFLICT:
                continue
            raise
        return True, node


def release(kube: Kube, namespace: str, node: str, name: str = "kured") -> None:
    """kured's Release: its own holder taken off (anyone else's is an error)."""
    where = path("apps", "v1", "daemonsets", namespace=namespace, name=name)
    found = kube.request("GET", where)
    holder = json.loads(found["metadata"]["annotations"][ANNOTATION])
    if holder["nodeID"] != node:
        raise AssertionError(f"not lock holder: {holder['nodeID']}")
    del found["metadata"]["annotations"][ANNOTATION]
    kube.request("PUT", where, body=found)


def holder(kube: Kube, namespace: str, name: str = "kured") -> str:
    """The nodeID in the lock now ("" when the annotation is off)."""
    found = kube.request("GET", path("apps", "v1", "daemonsets", namespace=namespace, name=name))
    value = (found["metadata"].get("annotations") or {}).get(ANNOTATION)
    return "" if value is None else str(json.loads(value)["nodeID"])
