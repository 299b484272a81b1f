"""SubjectAccessReviews for NodeService callers: the question asked, and the short cache."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from coordinator.live_nodes.access_review import AccessReviewer, access_review_body
from coordinator.live_nodes.token_review import Reviewed
from tests.support.clock import ManualClock

ALICE = Reviewed(
    authenticated=True,
    username="alice",
    uid="u-1",
    groups=("devs", "system:authenticated"),
    extra={"scopes": ("a",)},
)


class _AccessReviewApi:
    def __init__(self, answers: Iterator[bool]) -> None:
        self._answers = answers
        self.bodies: list[dict[str, Any]] = []

    def request(self, method: str, resource_path: str, **kwargs: Any) -> dict[str, Any]:
        assert (method, resource_path) == (
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        )
        self.bodies.append(kwargs["body"])
        allowed = next(self._answers)
        return {"status": {"allowed": allowed, "reason": "" if allowed else "no RBAC rule"}}

    def watch(self, *_args: Any) -> Iterator[dict[str, Any]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


def test_the_question_is_exactly_the_callers_rbac_on_gpunodes() -> None:
    body = access_review_body(ALICE, "get", "gpu-1")
    assert body["spec"] == {
        "user": "alice",
        "uid": "u-1",
        "groups": ["devs", "system:authenticated"],
        "extra": {"scopes": ["a"]},
        "resourceAttributes": {
            "group": "gpuctl.dev",
            "resource": "gpunodes",
            "verb": "get",
            "name": "gpu-1",
        },
    }
    assert "name" not in access_review_body(ALICE, "list", None)["spec"]["resourceAttributes"]


def test_answers_are_cached_per_user_verb_and_name_for_the_ttl() -> None:
    clock = ManualClock()
    api = _AccessReviewApi(iter([True, False, False]))
    access = AccessReviewer(api, monotonic=clock, ttl_seconds=10)
    assert access.cached(ALICE, "get", "gpu-1") is None
    assert access.allowed(ALICE, "get", "gpu-1") == (True, "")
    assert access.cached(ALICE, "get", "gpu-1") == (True, "")
    assert access.allowed(ALICE, "get", "gpu-2") == (False, "no RBAC rule")
    assert len(api.bodies) == 2
    clock.advance(10.5)  # a revoked permission stops working within the ttl
    assert access.cached(ALICE, "get", "gpu-1") is None
    assert access.allowed(ALICE, "get", "gpu-1") == (False, "no RBAC rule")
