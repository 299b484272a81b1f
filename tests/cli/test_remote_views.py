"""GPUNode objects and NodeService answers as the CLI shows them (plain data, no cluster)."""

from __future__ import annotations

import datetime

from google.protobuf import json_format

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.api.v1alpha1 import node_service_pb2 as service_pb
from gpuctl.cli.durations import short_age
from gpuctl.cli.node_inspect import remote_header
from gpuctl.cli.node_view import NodeView, from_gpunode, from_node_state
from gpuctl.cli.nodes_table import render_nodes

NOW = datetime.datetime(2026, 11, 29, 12, 0, 0, tzinfo=datetime.UTC)


def _report(*, blockers: int = 0) -> pb.NodeReport:
    report = pb.NodeReport(node_name="w1")
    report.devices.add(pci_address="0000:03:00.0", driver="xe", role=pb.Device.PHYSICAL)
    for fn in (1, 2):
        report.devices.add(
            pci_address=f"0000:03:00.{fn}", driver="vfio-pci", role=pb.Device.VIRTUAL
        )
    report.module.CopyFrom(
        pb.Module(name="xe", state=pb.Module.LIVE, backport_tag="xeb_v7.1.4.6_260728.7")
    )
    for _ in range(blockers):
        report.blockers.add(reason=pb.Blocker.ACTIVE_VFS, message="2 VFs enabled")
    return report


def _gpunode(name: str, session: str, report: object, received: str) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "status": {
            "session": session,
            "agentVersion": "0.1.0",
            "reportReceivedAt": received,
            "report": report,
        },
    }


def test_gpunode_with_report_becomes_a_view() -> None:
    stored = json_format.MessageToDict(_report(blockers=1))
    view = from_gpunode(_gpunode("w1", "Connected", stored, "2026-11-29T11:59:30Z"), NOW)
    assert view.connected is True
    assert view.age == datetime.timedelta(seconds=30)
    assert view.report == _report(blockers=1)
    assert view.problem == ""


def test_garbage_report_is_a_problem_not_a_crash() -> None:
    garbage = {"devices": "not a list"}
    view = from_gpunode(_gpunode("w2", "Connected", garbage, "2026-11-29T11:59:30Z"), NOW)
    assert view.report is None
    assert view.problem.startswith("the stored report cannot be read")


def test_unknown_fields_from_a_newer_agent_are_ignored() -> None:
    stored = json_format.MessageToDict(_report())
    stored["fieldFromTheFuture"] = 1
    view = from_gpunode(_gpunode("w1", "Connected", stored, "2026-11-29T11:59:30Z"), NOW)
    assert view.report is not None
    assert len(view.report.devices) == 3


def test_gpunode_without_status_has_no_report() -> None:
    view = from_gpunode({"metadata": {"name": "w3"}}, NOW)
    assert (view.connected, view.report, view.age) == (None, None, None)
    assert view.problem == "no report received yet"


def test_nodes_table_marks_disconnected_blockers_unknown() -> None:
    stored = json_format.MessageToDict(_report())
    views = [
        from_gpunode(_gpunode("b", "Disconnected", stored, "2026-11-29T09:00:00Z"), NOW),
        from_gpunode(_gpunode("a", "Connected", stored, "2026-11-29T11:59:00Z"), NOW),
    ]
    lines = render_nodes(views).splitlines()
    assert lines[0].split() == [
        "NODE",
        "GPUS",
        "DRIVERS",
        "MODULE",
        "BLOCKERS",
        "REPORT",
        "AGE",
        "AGENT",
    ]
    assert lines[1].split() == [
        "a",
        "1",
        "(+2",
        "VF)",
        "vfio-pci,xe",
        "xeb_v7.1.4.6_260728.7",
        "none",
        "60s",
        "connected",
    ]
    assert lines[2].split()[-3:] == ["unknown", "3h", "disconnected"]
    # --no-headers: the same rows, in the same columns, without the header line.
    assert render_nodes(views, show_headers=False).splitlines() == lines[1:]
    assert render_nodes(views, wide=True, show_headers=False).splitlines()[0].startswith("a ")
    assert render_nodes([], show_headers=False) == ""


def _stale(gpunode: dict[str, object]) -> dict[str, object]:
    """`gpunode` as the coordinator writes it once its agent fell silent past the bound."""
    status = dict(gpunode["status"])  # type: ignore[call-overload]
    status["conditions"] = [
        {
            "type": "Fresh",
            "status": "False",
            "reason": "NoHeartbeat",
            "message": "no heartbeat or report from the agent for 6.1s (the freshness bound is "
            "6s): the node's state is unknown",
            "lastTransitionTime": "2026-11-29T11:59:50Z",
        }
    ]
    status["unloadBlockers"] = "unknown"
    return {**gpunode, "status": status}


def test_a_gpunode_the_coordinator_calls_stale_is_unknown_though_connected() -> None:
    stored = json_format.MessageToDict(_report())
    frozen = from_gpunode(_stale(_gpunode("a", "Connected", stored, "2026-11-29T11:59:00Z")), NOW)
    assert frozen.connected is True
    assert frozen.stale is True
    assert frozen.problem.startswith("no heartbeat or report from the agent for 6.1s")
    assert render_nodes([frozen]).splitlines()[1].split()[-4:] == [
        "unknown",
        "60s",
        "connected,",
        "stale",
    ]
    assert "WARNING: no heartbeat or report" in remote_header(frozen)


def test_a_gpunode_the_coordinator_calls_fresh_is_trusted() -> None:
    stored = json_format.MessageToDict(_report())
    gpunode = _stale(_gpunode("a", "Connected", stored, "2026-11-29T11:59:00Z"))
    gpunode["status"]["conditions"][0].update(status="True", reason="AgentHeard")  # type: ignore[index]
    view = from_gpunode(gpunode, NOW)
    assert (view.stale, view.problem) == (False, "")
    assert render_nodes([view]).splitlines()[1].split()[-3:] == ["none", "60s", "connected"]


def test_nodes_table_lists_blocker_reasons() -> None:
    stored = json_format.MessageToDict(_report(blockers=2))
    view = from_gpunode(_gpunode("a", "Connected", stored, "2026-11-29T11:59:00Z"), NOW)
    assert "2: ACTIVE_VFS" in render_nodes([view])


def test_no_nodes_says_so() -> None:
    assert render_nodes([]) == "No GPU nodes have reported yet.\n"


def test_node_state_that_is_not_fresh_is_flagged() -> None:
    state = service_pb.NodeState(
        node_name="w1", session=service_pb.NodeState.CONNECTED, report=_report(), fresh=False
    )
    state.age.FromSeconds(400)
    view = from_node_state(state)
    assert view.age == datetime.timedelta(seconds=400)
    assert "freshness" in view.problem
    assert view.stale is True
    assert "WARNING" in remote_header(view)
    assert render_nodes([view]).splitlines()[1].split()[-2:] == ["connected,", "stale"]


def test_remote_header_for_a_connected_fresh_node_has_no_warning() -> None:
    view = NodeView("w1", True, _report(), datetime.timedelta(seconds=5), "0.1.0")
    assert remote_header(view) == "Agent connected, report received 5s ago, agent 0.1.0\n\n"


def test_short_ages() -> None:
    assert short_age(None) == "<none>"
    assert short_age(datetime.timedelta(seconds=-3)) == "0s"
    assert short_age(datetime.timedelta(seconds=119)) == "119s"
    assert short_age(datetime.timedelta(minutes=7, seconds=59)) == "7m"
    assert short_age(datetime.timedelta(hours=5)) == "5h"
    assert short_age(datetime.timedelta(days=12, hours=1)) == "12d"


def test_wide_adds_the_kernel_and_the_agent_version_unknown_when_not_said() -> None:
    report = _report()
    report.kernel_release = "6.8.0-60-generic"
    said = NodeView("a", True, report, datetime.timedelta(seconds=3), agent_version="0.1.0")
    silent = NodeView("b", None, None, None)
    lines = render_nodes([said, silent], wide=True).splitlines()
    assert lines[0].split()[-3:] == ["KERNEL", "AGENT", "VERSION"]
    assert lines[1].split()[-2:] == ["6.8.0-60-generic", "0.1.0"]
    assert lines[2].split()[-2:] == ["unknown", "unknown"]
    assert render_nodes([said]).splitlines()[0].split()[-1] == "AGENT"  # not wide: as before
