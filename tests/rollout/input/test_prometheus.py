"""The Prometheus gate (pure): an empty result passes; a non-empty one holds naming its
series; an answer that is not a successful query result holds with why (unknown is not
healthy); the decision holds every node while it does, and starts a node only on an answer
young enough, asking afresh otherwise."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.decide import decide
from gpuctl.rollout.input.prometheus import GateResult, gate_result
from gpuctl.rollout.input.settings import PrometheusGateSettings, RolloutSettings
from tests.support.rollout_samples import NOW, TARGET, node, rollout

QUERY = 'ALERTS{alertstate="firing"}'


def vector(*series: dict[str, str]) -> bytes:
    result = [{"metric": labels, "value": [1764500000.0, "1"]} for labels in series]
    return json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": result}}
    ).encode()


def test_an_empty_result_passes() -> None:
    assert gate_result(QUERY, 200, vector(), asked_at=NOW) == GateResult(True, "", NOW)


def test_a_firing_alert_holds_and_is_named_by_its_labels() -> None:
    alerts = [
        {"__name__": "ALERTS", "alertname": f"GpuBad{i}", "alertstate": "firing"} for i in range(5)
    ]
    result = gate_result(QUERY, 200, vector(*alerts), asked_at=NOW)
    assert not result.passed
    assert result.words == (
        f"the Prometheus gate {QUERY!r} returned 5 series: "
        'ALERTS{alertname="GpuBad0",alertstate="firing"}, '
        'ALERTS{alertname="GpuBad1",alertstate="firing"}, '
        'ALERTS{alertname="GpuBad2",alertstate="firing"} and 2 more'
    )


def test_answers_that_are_not_a_result_hold_with_why() -> None:
    bad_query = json.dumps(
        {"status": "error", "errorType": "bad_data", "error": "1:8: parse error: unclosed"}
    ).encode()
    cases: list[tuple[int | None, bytes, str, str]] = [
        (None, b"", "[Errno 111] Connection refused", "[Errno 111] Connection refused"),
        (400, bad_query, "", "HTTP 400, bad_data: 1:8: parse error: unclosed"),
        (502, b"<html>Bad Gateway</html>", "", "HTTP 502, not the API's JSON"),
        (
            401,
            b"Unauthorized: token expired\nmore\n",
            "",
            "HTTP 401, the token was not accepted (the coordinator's --prometheus-token-file): "
            "Unauthorized: token expired",
        ),
        (
            403,
            b"",
            "",
            "HTTP 403, the token's user may not query (the coordinator's --prometheus-token-file)",
        ),
        (200, b'{"status": "success", "data": {}}', "", "HTTP 200, no result list in the answer"),
        (
            200,
            b'{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}',
            "",
            "the query returns a scalar, not a vector",
        ),
    ]
    for status, body, error, words in cases:
        result = gate_result(QUERY, status, body, error, asked_at=NOW)
        assert not result.passed
        assert result.words == f"cannot evaluate the Prometheus gate {QUERY!r}: {words}"


GATE = PrometheusGateSettings("http://prometheus:9090", QUERY)


def decide_with(gate: GateResult | None, max_answer_age: float = 0.0) -> Any:
    settings = RolloutSettings(
        hold_after_first_node=False,
        prometheus_gate=dataclasses.replace(GATE, max_answer_age=max_answer_age),
    )
    nodes = [node("a", phase=Phase.PENDING, version=TARGET)]
    return decide(dataclasses.replace(rollout(nodes, settings=settings), gate=gate))


def starts(decision: Any) -> list[Phase | None]:
    return [a.phase_to for a in decision.actions if isinstance(a, PatchNode)]


def test_a_holding_gate_starts_no_node_holds_the_rollout_and_asks_again_soon() -> None:
    held = decide_with(GateResult(False, "the Prometheus gate 'q' returned 1 series: x", NOW))
    assert starts(held) == []
    assert held.status["state"] == "Held"
    assert held.status["holdKind"] == "PrometheusGate"
    assert held.status["message"] == (
        "held by the gate: the Prometheus gate 'q' returned 1 series: x"
    )
    assert held.requeue_after is not None
    assert held.requeue_after <= 2.0
    assert not held.ask_gate  # a holding answer is enough to hold
    passed = decide_with(GateResult(True, "", NOW))
    assert starts(passed) == [Phase.CHECKING]
    assert not passed.ask_gate


def test_a_node_starts_only_on_an_answer_asked_for_that_start() -> None:
    """An answer from an earlier pass (asked while the rollout was held, say) starts nothing:
    the decision asks for a fresh one, and its status is not held by a gate it has not
    asked."""
    earlier = NOW - timedelta(seconds=1)
    stale = decide_with(GateResult(True, "", earlier))
    assert starts(stale) == []
    assert stale.ask_gate
    assert stale.status["state"] == "Progressing"
    assert "holdKind" not in stale.status
    never_asked = decide_with(None)
    assert starts(never_asked) == []
    assert never_asked.ask_gate
    # Asked in this pass (after the pass read the clock) is as fresh as it gets.
    assert starts(decide_with(GateResult(True, "", NOW + timedelta(seconds=0.5)))) == [
        Phase.CHECKING
    ]


def test_a_stated_max_answer_age_lets_a_younger_answer_start_a_node() -> None:
    young = GateResult(True, "", NOW - timedelta(seconds=20))
    assert starts(decide_with(young, max_answer_age=30.0)) == [Phase.CHECKING]
    old = GateResult(True, "", NOW - timedelta(seconds=40))
    decision = decide_with(old, max_answer_age=30.0)
    assert starts(decision) == []
    assert decision.ask_gate


def test_no_answer_is_asked_for_while_nothing_would_start() -> None:
    """A node the bound keeps waiting does not make the decision ask Prometheus."""
    settings = RolloutSettings(hold_after_first_node=False, prometheus_gate=GATE)
    nodes = [
        node("a", phase=Phase.CHECKING, version=TARGET),
        node("b", phase=Phase.PENDING, version=TARGET),
    ]
    stale = GateResult(True, "", NOW - timedelta(seconds=5))
    decision = decide(dataclasses.replace(rollout(nodes, settings=settings), gate=stale))
    assert not decision.ask_gate
