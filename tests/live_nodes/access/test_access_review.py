"""SubjectAccessReviews for NodeService callers: the question asked, and the short cache."""

from __future__ import annotations

from coordinator.live_nodes.access.access_review import AccessReviewer, access_review_body
from coordinator.live_nodes.access.identity import Reviewed
from tests.support.clock import ManualClock
from tests.support.memory_api import MemoryApi

ALICE = Reviewed(
    authenticated=True,
    username="alice",
    uid="u-1",
    groups=("devs", "system:authenticated"),
    extra={"scopes": ("a",)},
)
REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


def _access_review_api(*answers: bool) -> MemoryApi:
    """An API server whose SubjectAccessReviews answer `answers`, in order."""
    api = MemoryApi()
    api.answer(
        "POST",
        REVIEWS,
        *({"status": {"allowed": a, "reason": "" if a else "no RBAC rule"}} for a in answers),
    )
    return api


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
    api = _access_review_api(True, False, False)
    access = AccessReviewer(api, monotonic=clock, ttl_seconds=10)
    assert access.cached(ALICE, "get", "gpu-1") is None
    assert access.allowed(ALICE, "get", "gpu-1") == (True, "")
    assert access.cached(ALICE, "get", "gpu-1") == (True, "")
    assert access.allowed(ALICE, "get", "gpu-2") == (False, "no RBAC rule")
    assert api.requests == [("POST", REVIEWS)] * 2
    clock.advance(10.5)  # a revoked permission stops working within the ttl
    assert access.cached(ALICE, "get", "gpu-1") is None
    assert access.allowed(ALICE, "get", "gpu-1") == (False, "no RBAC rule")
