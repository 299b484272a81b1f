"""bench/kmm_work.py reads KMM's manager's own counters: reconciles by controller (every result
summed), its CPU seconds, and the difference between two scrapes."""

from __future__ import annotations

from bench.kmm_work import KmmWork, parse_kmm_work

SCRAPE = """\
# HELP controller_runtime_reconcile_total Total number of reconciliations per controller
# TYPE controller_runtime_reconcile_total counter
controller_runtime_reconcile_total{controller="ModuleReconciler",result="success"} 120
controller_runtime_reconcile_total{controller="ModuleReconciler",result="error"} 3
controller_runtime_reconcile_total{controller="ModuleReconciler",result="requeue"} 0
controller_runtime_reconcile_total{controller="NodeModulesConfig",result="success"} 40
# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 180
"""


def test_reconciles_are_summed_over_results_and_cpu_is_read() -> None:
    work = parse_kmm_work(SCRAPE)
    assert work.reconciles == {"ModuleReconciler": 123.0, "NodeModulesConfig": 40.0}
    assert work.cpu_seconds == 12.5


def test_the_work_between_two_scrapes() -> None:
    before = KmmWork({"ModuleReconciler": 100.0}, 10.0)
    after = KmmWork({"ModuleReconciler": 123.0, "NodeModulesConfig": 40.0}, 12.5)
    assert after.since(before) == KmmWork(
        {"ModuleReconciler": 23.0, "NodeModulesConfig": 40.0}, 2.5
    )
