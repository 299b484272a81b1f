"""Which node a token speaks for: decisions over TokenReview answers, and the review cache."""

from __future__ import annotations

import base64
import json
from typing import Any

import grpc
import pytest

from coordinator.kube.client import KubeError
from coordinator.live_nodes.access.identity import (
    NODE_NAME_EXTRA,
    RefusalError,
    Reviewed,
    agent_node,
    bearer_token,
    check_claimed_node,
    require_token,
)
from coordinator.live_nodes.access.token_review import (
    ReviewUnavailableError,
    TokenReviewer,
    parse_review,
    token_expiry,
)
from gpuctl.common.names import AGENT_AUDIENCE
from tests.support.memory_api import MemoryApi

AGENT = "system:serviceaccount:gpuctl-system:gpuctl-agent"


def _reviewed(username: str = AGENT, node: str | None = "gpu-1") -> Reviewed:
    extra = {NODE_NAME_EXTRA: (node,)} if node else {}
    return Reviewed(authenticated=True, username=username, extra=extra)


def _refusal(call: Any) -> RefusalError:
    with pytest.raises(RefusalError) as raised:
        call()
    return raised.value


def test_bearer_token_from_metadata() -> None:
    assert bearer_token((("authorization", "Bearer abc"),)) == "abc"
    assert bearer_token((("Authorization", "bearer  abc "),)) == "abc"
    assert bearer_token((("authorization", "Basic abc"),)) == ""
    assert bearer_token(None) == ""
    assert _refusal(lambda: require_token("")).code is grpc.StatusCode.UNAUTHENTICATED


def test_the_agents_bound_token_names_its_node() -> None:
    assert agent_node(_reviewed(), AGENT, AGENT_AUDIENCE) == "gpu-1"


def test_an_unauthenticated_token_is_refused_with_the_reason() -> None:
    refusal = _refusal(
        lambda: agent_node(Reviewed(False, error="token has expired"), AGENT, AGENT_AUDIENCE)
    )
    assert refusal.code is grpc.StatusCode.UNAUTHENTICATED
    assert refusal.message == "token rejected for audience 'gpuctl.dev/agent': token has expired"


def test_another_service_account_is_refused() -> None:
    other = "system:serviceaccount:apps:default"
    refusal = _refusal(lambda: agent_node(_reviewed(username=other), AGENT, AGENT_AUDIENCE))
    assert refusal.code is grpc.StatusCode.PERMISSION_DENIED
    assert other in refusal.message


def test_a_token_not_bound_to_a_pod_on_a_node_is_refused() -> None:
    refusal = _refusal(lambda: agent_node(_reviewed(node=None), AGENT, AGENT_AUDIENCE))
    assert refusal.code is grpc.StatusCode.PERMISSION_DENIED
    assert "not bound to a Pod on a node" in refusal.message


def test_claiming_another_node_is_refused() -> None:
    check_claimed_node("gpu-1", "gpu-1")
    refusal = _refusal(lambda: check_claimed_node("gpu-1", "gpu-2"))
    assert refusal.code is grpc.StatusCode.PERMISSION_DENIED
    assert refusal.message == "this token speaks for node 'gpu-1', not 'gpu-2'"


def test_parse_review() -> None:
    reviewed = parse_review(
        {
            "status": {
                "authenticated": True,
                "user": {
                    "username": AGENT,
                    "uid": "u-1",
                    "groups": ["system:serviceaccounts"],
                    "extra": {NODE_NAME_EXTRA: ["gpu-7"]},
                },
            }
        }
    )
    assert reviewed.node_name == "gpu-7"
    assert reviewed.groups == ("system:serviceaccounts",)
    assert not parse_review({}).authenticated


def _jwt(claims: dict[str, Any]) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256'})}.{part(claims)}.signature"


def test_token_expiry_is_read_without_trusting_anything_else() -> None:
    assert token_expiry(_jwt({"exp": 1234})) == 1234.0
    assert token_expiry(_jwt({"sub": "x"})) is None
    assert token_expiry(_jwt({"exp": True})) is None
    assert token_expiry("opaque") is None
    assert token_expiry("a.!!!.c") is None


def _token_review_api(*answers: dict[str, Any] | KubeError) -> MemoryApi:
    """An API server whose TokenReviews answer `answers`, in order."""
    api = MemoryApi()
    api.answer("POST", "/apis/authentication.k8s.io/v1/tokenreviews", *answers)
    return api


OK = {"status": {"authenticated": True, "user": {"username": AGENT}}}
NO = {"status": {"authenticated": False, "error": "invalid bearer token"}}


def test_successes_are_cached_until_the_earlier_of_ttl_and_expiry() -> None:
    now = [1000.0]
    api = _token_review_api(OK, OK, OK)
    reviewer = TokenReviewer(api, wall_clock=lambda: now[0], ttl_seconds=60)
    short_lived = _jwt({"exp": 1010})
    assert reviewer.review(short_lived, (AGENT_AUDIENCE,)).authenticated
    assert reviewer.review(short_lived, (AGENT_AUDIENCE,)).authenticated
    assert reviewer.reviews_sent == 1
    assert api.bodies[0]["spec"] == {"token": short_lived, "audiences": [AGENT_AUDIENCE]}
    now[0] = 1010.0  # the token expired: ask again
    reviewer.review(short_lived, (AGENT_AUDIENCE,))
    assert reviewer.reviews_sent == 2
    # Another audience is another question.
    reviewer.review(short_lived, ())
    assert reviewer.reviews_sent == 3
    assert "audiences" not in api.bodies[2]["spec"]


def test_failures_and_tokens_of_unknown_lifetime_are_not_cached() -> None:
    api = _token_review_api(NO, OK, OK, OK)
    reviewer = TokenReviewer(api, wall_clock=lambda: 0.0)
    token = _jwt({"exp": 10_000})
    assert not reviewer.review(token).authenticated
    assert reviewer.review(token).authenticated
    reviewer.review("opaque")
    reviewer.review("opaque")
    assert reviewer.reviews_sent == 4


def test_an_unreachable_api_server_is_not_a_verdict() -> None:
    api = _token_review_api(KubeError(0, "connection refused"))
    reviewer = TokenReviewer(api, wall_clock=lambda: 0.0)
    with pytest.raises(ReviewUnavailableError, match="connection refused"):
        reviewer.review(_jwt({"exp": 10}))
