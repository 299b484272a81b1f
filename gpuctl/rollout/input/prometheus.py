"""The Prometheus gate (`spec.rollout.gates.prometheus`): what one answer of Prometheus' HTTP
API (`GET <url>/api/v1/query?query=...`) means for the rollout. Pure: bytes in, a verdict out.

The query must return an empty result for the next node to start. Anything else holds the
rollout, with why: a non-empty result (the series it returned, first few by their labels),
and every answer that is not a successful query result (Prometheus down or unreachable, an
HTTP error, `status: error` such as a bad query, a body that is not the API's JSON): a gate
that cannot be evaluated is not a passed gate. Every verdict carries when it was asked: a
node starts only on an answer young enough (decide.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# How often a held gate is asked again (and for how long an answer is used for the status;
# a start needs one no older than the gate's maxAnswerAge).
GATE_RECHECK_SECONDS = 2.0
# The most of an answer read.
MAX_ANSWER_BYTES = 1 << 20
# Series named in the words of a held gate; the rest are counted.
NAMED_SERIES = 3
# Answers of a server (or the proxy before it) that refused the coordinator, in words; and
# how much of what it said is quoted.
REFUSED = {401: "the token was not accepted", 403: "the token's user may not query"}
MAX_REFUSAL_CHARS = 200


@dataclass(frozen=True)
class GateResult:
    """passed: the query returned an empty result. Otherwise `words` says why it holds.
    `asked_at`: when the question was sent (wall clock)."""

    passed: bool
    words: str
    asked_at: datetime


def _series_words(item: Mapping[str, Any]) -> str:
    labels = item.get("metric") or {}
    if not isinstance(labels, Mapping):
        return "?"
    name = labels.get("__name__", "")
    rest = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{rest}}}"


class _UnevaluatedError(ValueError):
    """The answer is not a successful query result; the text says what it is."""


def _series(status: int | None, body: bytes, error: str) -> list[Any]:
    """The result vector of a successful answer, else _UnevaluatedError."""
    if status is None:
        raise _UnevaluatedError(error or "no answer")
    if status in REFUSED:
        said = body[:MAX_REFUSAL_CHARS].decode(errors="replace").strip().splitlines()
        first = f": {said[0]}" if said else ""
        raise _UnevaluatedError(
            f"HTTP {status}, {REFUSED[status]} (the coordinator's --prometheus-token-file){first}"
        )
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, Mapping):
        raise _UnevaluatedError(f"HTTP {status}, not the API's JSON")
    if answer.get("status") != "success":
        why = f"{answer.get('errorType', 'error')}: {answer.get('error', 'no error text')}"
        raise _UnevaluatedError(f"HTTP {status}, {why}")
    data = answer.get("data")
    if not isinstance(data, Mapping) or not isinstance(data.get("result"), list):
        raise _UnevaluatedError(f"HTTP {status}, no result list in the answer")
    if data.get("resultType") not in ("vector", "matrix"):
        raise _UnevaluatedError(f"the query returns a {data.get('resultType')}, not a vector")
    return list(data["result"])


def gate_result(
    query: str, status: int | None, body: bytes, error: str = "", *, asked_at: datetime
) -> GateResult:
    """The verdict on one answer, asked at `asked_at`: `status` is the HTTP status (None when
    no answer came, and `error` says why), `body` the response body."""
    try:
        result = _series(status, body, error)
    except _UnevaluatedError as err:
        words = f"cannot evaluate the Prometheus gate {query!r}: {err}"
        return GateResult(False, words, asked_at)
    if not result:
        return GateResult(True, "", asked_at)
    named = [_series_words(item) for item in result[:NAMED_SERIES] if isinstance(item, Mapping)]
    more = len(result) - len(named)
    listed = ", ".join(named) + (f" and {more} more" if more > 0 else "")
    words = f"the Prometheus gate {query!r} returned {len(result)} series: {listed}"
    return GateResult(False, words, asked_at)
