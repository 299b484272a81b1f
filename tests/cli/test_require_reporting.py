"""`gpuctl nodes --require-reporting N` (gpuctl/cli/reporting.py): a node counts only when its
agent is connected and its report fresh; the refusal names the silent nodes and why."""

from __future__ import annotations

import datetime

import pytest

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.cli.main import build_parser, main
from gpuctl.cli.node_view import NodeView
from gpuctl.cli.reporting import is_reporting, reporting_shortfall

AGE = datetime.timedelta(seconds=3)


def view(name: str, **changes: object) -> NodeView:
    fields: dict[str, object] = {
        "name": name,
        "connected": True,
        "report": pb.NodeReport(node_name=name),
        "age": AGE,
    }
    fields.update(changes)
    return NodeView(**fields)  # type: ignore[arg-type]


def test_only_a_connected_fresh_report_counts() -> None:
    assert is_reporting(view("a"))
    assert not is_reporting(view("b", connected=False))
    assert not is_reporting(view("c", connected=None))
    assert not is_reporting(view("d", stale=True))
    assert not is_reporting(view("e", report=None, age=None))
    assert not is_reporting(view("f", problem="report unreadable: truncated"))


def test_enough_reporting_nodes_is_no_shortfall() -> None:
    assert reporting_shortfall([view("a"), view("b", stale=True)], 1) == ""
    assert reporting_shortfall([], 0) == ""


def test_a_shortfall_names_each_silent_node_and_why() -> None:
    views = [
        view("a"),
        view("b", connected=False),
        view("c", stale=True),
        view("d", problem="report unreadable: truncated"),
    ]
    assert reporting_shortfall(views, 2) == (
        "1 of 4 GPU node(s) have an agent reporting, at least 2 required (b: agent "
        "disconnected; c: report stale; d: report unreadable: truncated)"
    )
    assert reporting_shortfall([], 1) == (
        "0 of 0 GPU node(s) have an agent reporting, at least 1 required"
    )


def test_many_silent_nodes_are_counted_past_the_first_five() -> None:
    views = [view(f"n{i}", connected=None) for i in range(8)]
    shortfall = reporting_shortfall(views, 1)
    assert shortfall.count("no agent has connected") == 5
    assert shortfall.endswith("; and 3 more)")


@pytest.mark.parametrize("bad", ["-1", "two"])
def test_the_count_must_be_a_whole_number(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["nodes", "--require-reporting", bad])
    assert "--require-reporting" in capsys.readouterr().err


@pytest.mark.parametrize("other", [["-o", "json"], ["--kernel-check"]])
def test_it_counts_the_node_list_only(other: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nodes", "--require-reporting", "1", *other]) == 1
    assert "--require-reporting checks the node list itself" in capsys.readouterr().err
