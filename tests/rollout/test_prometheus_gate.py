"""The Prometheus gate (pure): an empty result passes; a non-empty one holds naming its
series; an answer that is not a successful query result holds with why (unknown is not
healthy); and the decision holds every node while it does."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from coordinator.rollout.actions import PatchNode
from coordinator.rollout.decide import decide
from coordinator.rollout.prometheus_gate import GateResult, gate_result
from coordinator.rollout.settings import RolloutSettings
from gpuctl.common.names import Phase
from tests.support.rollout_samples import TARGET, node, rollout

QUERY = 'ALERTS{alertstate="firing"}'


def vector(*series: dict[str, str]) -> bytes:
    result = [{"metric": labels, "value": [1764500000.0, "1"]} for labels in series]
    return json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": result}}
    ).encode()


def test_an_empty_result_passes() -> None:
    assert gate_result(QUERY, 200, vector()) == GateResult(True, "")


def test_a_firing_alert_holds_and_is_named_by_its_labels() -> None:
    alerts = [
        {"__name__": "ALERTS", "alertname": f"GpuBad{i}", "alertstate": "firing"} for i in range(5)
    ]
    result = gate_result(QUERY, 200, vector(*alerts))
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
        (200, b'{"status": "success", "data": {}}', "", "HTTP 200, no result list in the answer"),
        (
            200,
            b'{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}',
            "",
            "the query returns a scalar, not a vector",
        ),
    ]
    for status, body, error, words in cases:
        result = gate_result(QUERY, status, body, error)
        assert not result.passed
        assert result.words == f"cannot evaluate the Prometheus gate {QUERY!r}: {words}"


def decide_with(gate: GateResult | None) -> Any:
    settings = dataclasses.replace(RolloutSettings(hold_after_first_node=False))
    nodes = [node("a", phase=Phase.PENDING, version=TARGET)]
    return decide(dataclasses.replace(rollout(nodes, settings=settings), gate=gate))


def test_a_holding_gate_starts_no_node_holds_the_rollout_and_asks_again_soon() -> None:
    held = decide_with(GateResult(False, "the Prometheus gate 'q' returned 1 series: x"))
    assert not [a for a in held.actions if isinstance(a, PatchNode)]
    assert held.status["state"] == "Held"
    assert held.status["message"] == (
        "held by the gate: the Prometheus gate 'q' returned 1 series: x"
    )
    assert held.requeue_after is not None
    assert held.requeue_after <= 2.0
    passed = decide_with(GateResult(True, ""))
    assert [a.phase_to for a in passed.actions if isinstance(a, PatchNode)] == [Phase.CHECKING]
