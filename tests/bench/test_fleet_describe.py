"""bench/fleet_scale.py's report: every figure a run gathers is printed, with the floor and,
when they ran, the floor with gpuctl's node writes and the floor with the workload off each
node (KMM's steps 3 and 7) beside gpuctl's rollout (ratios, KMM's work,
the machine's CPU, the stretches, the fleet's start); without a floor (shards), none of it."""

from __future__ import annotations

from typing import Any

from bench.fleet_scale import describe
from bench.kmm_timeline import stretches
from bench.kmm_work import Durations, KmmWork
from bench.timing import Timings


def rollout_figures() -> dict[str, Any]:
    return {
        "nodes": 10,
        "shards": 1,
        "streams_per_connection": 100,
        "delay": 1.0,
        "bound": 1,
        "total_seconds": 60.0,
        "fastest_node_seconds": 5.0,
        "median_node_seconds": 6.0,
        "waves": 10,
        "floor_seconds": 50.0,
        "floor_delay_seconds": 20.0,
        "handoff": Timings("handoff", (0.01, 0.02, 0.5)),
        "most_unavailable": 1,
        "requests_per_node": 40.0,
        "requests_by_kind": {"PATCH nodes": 70},
        "gpunode_writes": 30.0,
        "passes": 120.0,
        "pass_seconds": 1.5,
        "cpu_seconds_rollout": [3.0],
        "cpu_seconds_total": [4.0],
        "peak_rss_kb": [90 * 1024],
        "rss_kb": [89 * 1024],
        "reports_per_second": 1000.0,
        "handshake_retries": 0,
        "pods_running_after": 10,
        "violations": 0,
        "first_load_seconds": 6.0,
        "kubelet_errors": 0,
        "step_means": {"Checking": 0.5, "Loading": 4.0},
    }


def run_figures(run: str, seconds: float, queued: float) -> dict[str, Any]:
    node = {"written": 1.0, "ready": 1.0 + seconds / 10}
    work = KmmWork(
        {"NodeModulesConfig": 70.0},
        2.0,
        queued=Durations({"NodeModulesConfig": queued * 70}, {"NodeModulesConfig": 70.0}),
        worked=Durations({"NodeModulesConfig": 7.0}, {"NodeModulesConfig": 70.0}),
    )
    return {
        f"{run}_kmm_seconds": seconds,
        f"{run}_kmm_batches": 10,
        f"{run}_kmm_node": Timings("label -> ready", (seconds / 10,)),
        f"machine_busy_{run}": 0.5,
        f"process_cpu_{run}": {"kube-apiserver": seconds, "manager": seconds / 2},
        f"stretches_{run}": stretches({"n1": node}),
        f"fleet_start_{run}": f"the first KMM write ({run})",
        f"kmm_work_{run}": work,
    }


def test_the_report_sets_the_rollout_beside_both_floors() -> None:
    figures = rollout_figures()
    figures.update(run_figures("rollout", 60.0, 6.0) | {"machine_busy_rollout": 0.9})
    figures.update(run_figures("floor", 50.0, 2.0))
    figures.update(run_figures("stepped", 55.0, 4.0))
    report = describe(figures)
    assert "gpuctl / that floor: 1.200 (+20.0 %)" in report
    assert "that / the floor: 1.100; gpuctl / that: 1.091" in report
    assert "CPU 0.200 vs 0.200 vs 0.200 s" in report
    assert "NodeModulesConfig 6000 / 100 ms vs 2000 / 100 ms vs 4000 / 100 ms" in report
    assert (
        "CPU seconds by process (bench.process_cpu), gpuctl vs floor vs floor+writes: "
        "kube-apiserver 60.0 vs 50.0 vs 55.0, manager 30.0 vs 25.0 vs 27.5"
    ) in report
    assert "90 % (gpuctl), 50 % (floor), 50 % (floor+writes)" in report
    header = next(line for line in report.splitlines() if "stretch, median (p90) s" in line)
    assert header.split()[-4:] == ["gpuctl", "floor", "floor+writes", "whose"]
    assert "the version asked, then (floor+writes): the first KMM write (stepped)" in report
    nodes = figures["nodes"]
    assert (
        f"rollout passes (gpuctl_rollout_pass_seconds): 120 ({120 / nodes:.1f} per node), "
        "mean 12.5 ms, 1.5 s in all"
    ) in report


def test_without_the_stepped_floor_only_two_runs_are_set_side_by_side() -> None:
    figures = rollout_figures()
    figures.update(run_figures("rollout", 60.0, 6.0))
    figures.update(run_figures("floor", 50.0, 2.0))
    report = describe(figures)
    assert "floor+writes" not in report
    assert "gpuctl vs floor: CPU" in report


def test_sharded_runs_have_no_floor_lines() -> None:
    report = describe(rollout_figures() | {"shards": 2})
    assert "KMM's docs" not in report
    assert "total 60.0 s" in report


def test_the_floor_with_the_workload_off_each_node_is_set_beside_the_others() -> None:
    figures = rollout_figures()
    figures.update(run_figures("rollout", 60.0, 6.0))
    figures.update(run_figures("floor", 50.0, 2.0))
    figures.update(run_figures("drained", 57.0, 3.0))
    report = describe(figures)
    assert "steps 3 and 7 (floor+drain" in report
    assert "57.0 s; that / the floor: 1.140; gpuctl / that: 1.053 (+5.3 %)" in report
    assert "gpuctl vs floor vs floor+drain: CPU" in report
    assert "50 % (gpuctl), 50 % (floor), 50 % (floor+drain)" in report
