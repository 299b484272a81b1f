"""KubeError names the answers the coordinator handles, so no module restates status codes."""

from __future__ import annotations

import pytest

from coordinator.kube.client import KubeError

NAMED = ("not_found", "conflict", "gone", "too_many_requests")


@pytest.mark.parametrize(
    ("status", "name"),
    [(404, "not_found"), (409, "conflict"), (410, "gone"), (429, "too_many_requests")],
)
def test_each_status_has_exactly_its_name(status: int, name: str) -> None:
    error = KubeError(status, "reason")
    assert {n for n in NAMED if getattr(error, n)} == {name}


@pytest.mark.parametrize("status", [0, 400, 403, 422, 500])
def test_other_statuses_have_none(status: int) -> None:
    error = KubeError(status, "reason")
    assert not any(getattr(error, n) for n in NAMED)
