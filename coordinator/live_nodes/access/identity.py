"""Which node an agent stream speaks for: pure decisions over a TokenReview's answer.

The agent's ServiceAccount token must be (1) valid for our audience, (2) a token of the agent's
own ServiceAccount (any pod can mount a token with any audience, so the audience alone proves
nothing), and (3) bound to a Pod on a node, whose name the review carries. The Hello must name
that same node. Each failure has its own gRPC status and a message saying what was wrong.
`Reviewed` is that answer; coordinator/live_nodes/access/token_review.py asks the API server for it
and caches it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

BEARER = "bearer "
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


@dataclass(frozen=True)
class Reviewed:
    """A TokenReview's answer."""

    authenticated: bool
    username: str = ""
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    error: str = ""

    @property
    def node_name(self) -> str | None:
        """The node of the Pod a bound service-account token belongs to."""
        values = self.extra.get(NODE_NAME_EXTRA) or ()
        return values[0] if len(values) == 1 else None


class RefusalError(Exception):
    """Why a stream or call is refused, as the gRPC status it ends with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


def bearer_token(metadata: Iterable[tuple[Any, Any]] | None) -> str:
    """The token of an `authorization: Bearer <token>` metadata entry ("" when none)."""
    for key, value in metadata or ():
        if key.lower() != "authorization" or not isinstance(value, str):
            continue
        if value[: len(BEARER)].lower() == BEARER:
            return value[len(BEARER) :].strip()
    return ""


def require_token(token: str) -> str:
    if not token:
        raise RefusalError(
            grpc.StatusCode.UNAUTHENTICATED,
            "no bearer token: send a ServiceAccount token as 'authorization: Bearer <token>'",
        )
    return token


def agent_node(reviewed: Reviewed, agent_username: str, audience: str) -> str:
    """The node an agent's reviewed token speaks for, or a RefusalError."""
    if not reviewed.authenticated:
        why = reviewed.error or "not authenticated"
        raise RefusalError(
            grpc.StatusCode.UNAUTHENTICATED,
            f"token rejected for audience {audience!r}: {why}",
        )
    if reviewed.username != agent_username:
        raise RefusalError(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{reviewed.username} is not the agent's ServiceAccount ({agent_username})",
        )
    node = reviewed.node_name
    if node is None:
        raise RefusalError(
            grpc.StatusCode.PERMISSION_DENIED,
            "the token is not bound to a Pod on a node (use a projected ServiceAccount token)",
        )
    return node


def check_claimed_node(token_node: str, claimed: str) -> None:
    """A Hello (or report) naming another node than the token's is refused."""
    if claimed != token_node:
        raise RefusalError(
            grpc.StatusCode.PERMISSION_DENIED,
            f"this token speaks for node {token_node!r}, not {claimed[:253]!r}",
        )
