"""Which agents a shard refuses, and with which words
(coordinator/live_nodes/access/node_scope.py)."""

from __future__ import annotations

import grpc
import pytest

from coordinator.live_nodes.access.identity import RefusalError
from coordinator.live_nodes.access.node_scope import check_in_scope, kept_if_ours

SELECTOR = "gpuctl.dev/pool=a"


def test_a_node_of_the_pool_is_let_in() -> None:
    check_in_scope("gpu-1", True, SELECTOR, "")


def test_another_pools_node_is_refused_with_where_to_go() -> None:
    with pytest.raises(RefusalError) as refused:
        check_in_scope("gpu-9", False, SELECTOR, "")
    assert refused.value.code is grpc.StatusCode.FAILED_PRECONDITION
    assert refused.value.message == (
        "node gpu-9 does not match this coordinator's --node-selector 'gpuctl.dev/pool=a': "
        "its agent must connect to the coordinator serving its node pool"
    )


def test_an_unknown_node_is_refused_for_now_never_let_in() -> None:
    with pytest.raises(RefusalError) as refused:
        check_in_scope("gpu-1", None, SELECTOR, "")
    assert refused.value.code is grpc.StatusCode.UNAVAILABLE
    assert "has not listed its nodes (--node-selector 'gpuctl.dev/pool=a') yet;" in str(
        refused.value.message
    )


def test_why_the_nodes_are_not_listed_is_said() -> None:
    trouble = "listing or watching nodes failed: 403 Forbidden"
    with pytest.raises(RefusalError) as refused:
        check_in_scope("gpu-1", None, SELECTOR, trouble)
    assert trouble in refused.value.message


def test_a_watch_keeps_only_the_name_of_another_pools_object() -> None:
    ours = {"gpu-1": True, "gpu-2": False}
    keep = kept_if_ours(ours.get, lambda obj: {**obj, "kept": True})
    report = {"metadata": {"name": "gpu-1", "resourceVersion": "7"}, "status": {"report": "..."}}
    assert keep(report) == {**report, "kept": True}
    theirs = {**report, "metadata": {"name": "gpu-2", "resourceVersion": "8"}}
    assert keep(theirs) == {"metadata": {"name": "gpu-2", "resourceVersion": "8"}}
    unknown = {**report, "metadata": {"name": "gpu-3", "resourceVersion": "9"}}
    assert keep(unknown) == {"metadata": {"name": "gpu-3", "resourceVersion": "9"}}
