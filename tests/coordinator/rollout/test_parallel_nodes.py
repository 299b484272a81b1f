"""A pass's actions are carried out node by node in parallel: one node's failed write ends
that node's share of the pass only, and each node's actions keep the decision's order."""

from __future__ import annotations

import copy
import threading
from typing import Any

from coordinator.kube.client import KubeError
from coordinator.rollout.act import CONFLICT_RETRY_SECONDS
from gpuctl.common import names
from tests.coordinator.rollout.test_controller import NODE_PATH, View, phase, world
from tests.support.memory_api import MemoryApi

SECOND = "/api/v1/nodes/n2"
PATHS = (NODE_PATH, SECOND)


class TwoNodes(View):
    def nodes(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(self.api.objects[p]) for p in PATHS]


def two_node_world() -> tuple[MemoryApi, Any]:
    api, controller, _clock = world()
    second = copy.deepcopy(api.objects[NODE_PATH])
    second["metadata"]["name"] = "n2"
    second["metadata"]["uid"] = "uid-n2"
    api.objects[SECOND] = second
    controller.gatherer.view = TwoNodes(api)
    return api, controller


def test_one_nodes_conflict_does_not_hold_back_the_other_node() -> None:
    api, controller = two_node_world()
    api.fail[("PATCH", NODE_PATH)] = KubeError(409, "Conflict")
    assert controller.sync("gpu") == CONFLICT_RETRY_SECONDS
    assert phase(api) == ""  # n1's write failed: nothing happened to it
    assert api.objects[SECOND]["metadata"]["labels"][names.STATE_LABEL] == "Pending"
    controller.sync("gpu")  # the retry places n1 too
    assert phase(api) == "Pending"


def test_the_nodes_of_one_pass_are_written_concurrently_each_in_order() -> None:
    """Both nodes' first writes are in flight at once (a barrier only two parallel writers
    pass); without parallel execution the barrier times out and the writes fail."""
    api, controller = two_node_world()
    barrier = threading.Barrier(2, timeout=10)
    request = api.request

    def meeting(method: str, resource_path: str, **kw: Any) -> dict[str, Any]:
        if method == "PATCH" and resource_path in PATHS:
            barrier.wait()
        return request(method, resource_path, **kw)

    api.request = meeting  # type: ignore[method-assign]
    controller.sync("gpu")
    assert not barrier.broken
    labels = [api.objects[p]["metadata"]["labels"].get(names.STATE_LABEL) for p in PATHS]
    assert labels == ["Pending", "Pending"]
