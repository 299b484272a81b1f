"""GPUNode status from a record, and the merge patch that writes only real changes."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from coordinator.live_nodes.gpunodes.gpunode_status import (
    desired_status,
    module_word,
    status_patch,
    summary,
)
from coordinator.live_nodes.streams.freshness import FRESH, Freshness
from coordinator.live_nodes.streams.node_record import NodeRecord, Session
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from gpuctl.common.merge_patch import apply_merge_patch
from gpuctl.common.names import FreshReason
from testbed.agent_client import OPEN_CLIENTS, sample_report

RECEIVED = datetime(2026, 11, 29, 23, 1, 2, 345678, tzinfo=UTC)
WRITTEN = datetime(2026, 11, 29, 23, 2, tzinfo=UTC)
BOUND = 6.0
SILENT = Freshness(FreshReason.NO_HEARTBEAT, "agent report is stale (agent last heard 7s ago)", 6.5)


def _record(report: report_pb.NodeReport | None = None, **changes: object) -> NodeRecord:
    record = NodeRecord(
        "gpu-1",
        session=Session.CONNECTED,
        agent_version="v1",
        boot_id="boot",
        report=report,
        report_received_at=RECEIVED if report is not None else None,
    )
    return dataclasses.replace(record, **changes)  # type: ignore[arg-type]


def _desired(
    record: NodeRecord | None, verdict: Freshness = FRESH, at: datetime = WRITTEN
) -> dict[str, Any]:
    return desired_status(record, verdict, BOUND, at)


def test_module_word_prefers_tag_then_version_then_srcversion_then_state() -> None:
    module = report_pb.Module(state=report_pb.Module.LIVE, srcversion="ABCDEF0123456789")
    report = report_pb.NodeReport(module=module)
    assert module_word(report) == "ABCDEF012345"
    report.module.version = "1.2.3"
    assert module_word(report) == "1.2.3"
    report.module.backport_tag = "xeb_v7"
    assert module_word(report) == "xeb_v7"
    assert (
        module_word(
            report_pb.NodeReport(module=report_pb.Module(state=report_pb.Module.NOT_LOADED))
        )
        == "not loaded"
    )
    assert module_word(report_pb.NodeReport()) == "unknown"


def test_summary_counts_gpus_without_vfs() -> None:
    assert summary(sample_report("gpu-1", (OPEN_CLIENTS,))) == {
        "gpus": 1,
        "drivers": ["vfio-pci", "xe"],
        "module": "xeb_v7.1.4.6_260728.7",
        "blockers": 1,
        "atBoot": "Unknown",  # the sample comes from an agent that does not say
    }
    autoloading = sample_report("gpu-1")
    autoloading.in_tree_autoload.state = report_pb.InTreeAutoload.AUTOLOADS
    assert summary(autoloading)["atBoot"] == "Autoloads"
    autoloading.in_tree_autoload.state = report_pb.InTreeAutoload.BLACKLISTED
    assert summary(autoloading)["atBoot"] == "Blacklisted"


def test_desired_status_shape() -> None:
    status = _desired(_record(sample_report("gpu-1"), answered_request="r1"))
    assert status["session"] == "Connected"
    assert status["reportReceivedAt"] == "2026-11-29T23:01:02.345678Z"
    assert status["report"]["nodeName"] == "gpu-1"
    assert status["report"]["module"]["state"] == "LIVE"
    assert status["answeredInspectRequest"] == "r1"
    assert status["inspectError"] is None
    assert status["unloadBlockers"] == "0"
    assert status["conditions"] == [
        {
            "type": "Fresh",
            "status": "True",
            "reason": "AgentHeard",
            "message": "the agent was heard from within the 6s freshness bound and the report "
            "is its latest",
            "lastTransitionTime": "2026-11-29T23:02:00.000000Z",
        }
    ]
    unknown = _desired(None, Freshness(FreshReason.NO_REPORT, "no agent report"))
    assert unknown["session"] == "Disconnected"
    assert unknown["unloadBlockers"] == "unknown"
    assert unknown["conditions"][0]["message"] == "no agent report: the node's state is unknown"


def test_only_observed_at_changing_is_no_change() -> None:
    stored = _desired(_record(sample_report("gpu-1")))
    later = _record(
        sample_report("gpu-1", observed_seconds=60),
        report_received_at=datetime(2026, 11, 29, 23, 5, tzinfo=UTC),
    )
    assert status_patch(stored, _desired(later)) == {}


def test_a_vanished_list_is_removed_by_the_patch() -> None:
    stored = _desired(_record(sample_report("gpu-1", (OPEN_CLIENTS,))))
    patch = status_patch(stored, _desired(_record(sample_report("gpu-1"))))
    assert patch["report"]["blockers"] is None
    assert patch["summary"] == {"blockers": 0}
    assert patch["unloadBlockers"] == "0"
    assert "blockers" not in apply_merge_patch(stored, patch)["report"]


def test_an_answered_request_writes_the_report_with_it() -> None:
    stored = _desired(_record(sample_report("gpu-1")))
    answered = _record(sample_report("gpu-1", observed_seconds=5), answered_request="r2")
    patch = status_patch(stored, _desired(answered))
    assert patch["answeredInspectRequest"] == "r2"
    assert patch["report"] == {"observedAt": "2027-01-15T08:00:05Z"}
    assert "reportReceivedAt" in patch


def test_an_error_answer_and_its_clearing() -> None:
    stored = _desired(_record(sample_report("gpu-1")))
    failed = _record(sample_report("gpu-1"), answered_request="r3", inspect_error="gone")
    patch = status_patch(stored, _desired(failed))
    assert (patch["answeredInspectRequest"], patch["inspectError"]) == ("r3", "gone")
    stored = apply_merge_patch(stored, patch)
    succeeded = _record(sample_report("gpu-1"), answered_request="r4")
    patch = status_patch(stored, _desired(succeeded))
    assert patch["inspectError"] is None


def test_no_report_never_erases_a_stored_one() -> None:
    stored = _desired(_record(sample_report("gpu-1")))
    unknown = Freshness(FreshReason.NO_REPORT, "no agent report")
    patch = status_patch(stored, _desired(_record(None, session=Session.DISCONNECTED), unknown))
    assert set(patch) == {"session", "conditions", "unloadBlockers"}
    assert (patch["session"], patch["unloadBlockers"]) == ("Disconnected", "unknown")
    assert apply_merge_patch(stored, patch)["report"] == stored["report"]


def test_a_silent_agent_makes_the_report_stale_and_its_blockers_unknown() -> None:
    record = _record(sample_report("gpu-1", (OPEN_CLIENTS,)))
    stored = _desired(record)
    patch = status_patch(stored, _desired(record, SILENT))
    assert patch == {
        "conditions": [
            {
                "type": "Fresh",
                "status": "False",
                "reason": "NoHeartbeat",
                "message": "no heartbeat or report from the agent for 6.5s (the freshness bound "
                "is 6s): the node's state is unknown",
                "lastTransitionTime": "2026-11-29T23:02:00.000000Z",
            }
        ],
        "unloadBlockers": "unknown",
    }
    assert apply_merge_patch(stored, patch)["summary"]["blockers"] == 1  # the report's own count


def test_staying_stale_is_no_change_though_the_silence_grows() -> None:
    record = _record(sample_report("gpu-1"))
    stored = _desired(record, SILENT)
    longer = Freshness(
        FreshReason.NO_HEARTBEAT, "agent report is stale (agent last heard 99s ago)", 99
    )
    assert status_patch(stored, _desired(record, longer, datetime(2026, 11, 30, tzinfo=UTC))) == {}


def test_a_new_reason_keeps_the_transition_time_and_recovery_sets_a_new_one() -> None:
    record = _record(sample_report("gpu-1"))
    stored = _desired(record, SILENT)
    later = datetime(2026, 11, 29, 23, 9, tzinfo=UTC)
    superseded = Freshness(
        FreshReason.REPORT_SUPERSEDED, "the agent's latest report was not received"
    )
    patch = status_patch(stored, _desired(record, superseded, later))
    (condition,) = patch["conditions"]
    assert (condition["reason"], condition["lastTransitionTime"]) == (
        "ReportSuperseded",
        "2026-11-29T23:02:00.000000Z",
    )
    assert "unloadBlockers" not in patch  # unknown either way
    patch = status_patch(stored, _desired(record, FRESH, later))
    (condition,) = patch["conditions"]
    assert (condition["status"], condition["lastTransitionTime"]) == (
        "True",
        "2026-11-29T23:09:00.000000Z",
    )
    assert patch["unloadBlockers"] == "0"
