"""spec.rollout and status.rollout on the real API server: the CRD's schema and CEL rule
refuse nonsense settings with their messages, defaults fill in, and the printer columns
show the rollout's progress."""

from __future__ import annotations

import json
from typing import Any

import pytest

from coordinator.kube.client import KubeError
from testbed.cluster_api import Api, gpudriver, simple_spec

pytestmark = pytest.mark.integration

REJECTED = [
    ({"maxUnavailable": 0}, "maxUnavailable must be a number >= 1 or a percentage"),
    ({"maxUnavailable": "0%"}, "maxUnavailable must be a number >= 1 or a percentage"),
    ({"maxUnavailable": "150%"}, "maxUnavailable must be a number >= 1 or a percentage"),
    ({"maxUnavailable": "two"}, "maxUnavailable must be a number >= 1 or a percentage"),
    ({"verifyBy": "md5"}, 'Unsupported value: "md5"'),
    ({"failureBudget": 0}, "should be greater than or equal to 1"),
    ({"timeouts": {"drain": "ten minutes"}}, "timeouts.drain"),
    ({"paused": "yes"}, "paused: Invalid value"),
]


@pytest.mark.parametrize(("rollout", "message"), REJECTED)
def test_nonsense_rollout_settings_are_refused(
    api: Api, namespace: str, rollout: dict[str, Any], message: str
) -> None:
    spec = {**simple_spec(namespace), "rollout": rollout}
    with pytest.raises(KubeError) as refused:
        api.create_driver(gpudriver("bad-rollout", namespace, spec))
    assert refused.value.status == 422
    assert message in refused.value.message


@pytest.mark.parametrize("max_unavailable", [1, 3, "25%", "100%"])
def test_good_settings_are_kept(api: Api, namespace: str, max_unavailable: int | str) -> None:
    spec = {**simple_spec(namespace), "rollout": {"maxUnavailable": max_unavailable}}
    created = api.create_driver(gpudriver("good-rollout", namespace, spec))
    rollout = created["spec"]["rollout"]
    assert rollout["maxUnavailable"] == max_unavailable
    # Defaults the API server fills in (the contract the CLI and the engine share).
    assert rollout["holdAfterFirstNode"] is True
    assert rollout["failureBudget"] == 1
    assert rollout["verifyBy"] == "backportTag"
    api.delete_driver("good-rollout")


def test_printer_columns_show_state_target_progress_blocked_and_failed(
    api: Api, namespace: str, kube_admin: Any
) -> None:
    api.create_driver(gpudriver("columns", namespace, simple_spec(namespace)))
    status = {
        "rollout": {
            "targetVersion": "v2",
            "state": "Progressing",
            "total": 5,
            "updated": 3,
            "progress": "3/5",
            "counts": {"Done": 3, "Blocked": 1, "Failed": 1},
            "nodes": [
                {
                    "name": "w5",
                    "phase": "Blocked",
                    "reason": "pid 1",
                    "since": "2026-11-29T12:00:00Z",
                }
            ],
            "startedAt": "2026-11-29T11:00:00Z",
        }
    }
    api.kube.request(
        "PATCH",
        api.driver_path("columns") + "/status",
        body={"status": status},
        content_type="application/merge-patch+json",
    )
    serialized = kube_admin.param_serialize(
        method="GET",
        resource_path=api.driver_path("columns"),
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
    )
    table = json.loads(kube_admin.call_api(*serialized).read())
    columns = [c["name"] for c in table["columnDefinitions"]]
    cells = dict(zip(columns, table["rows"][0]["cells"], strict=True))
    assert (cells["State"], cells["Target"], cells["Nodes"]) == ("Progressing", "v2", "3/5")
    assert (cells["Blocked"], cells["Failed"]) == (1, 1)
