"""bench/kmm_work.py reads KMM's manager's own counters: reconciles by controller (every result
summed), its controllers' queue waits and reconcile durations (histogram sums and counts), its
CPU seconds, and the difference between two scrapes."""

from __future__ import annotations

from bench.kmm_work import Durations, KmmWork, parse_kmm_work

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
# HELP workqueue_queue_duration_seconds How long in seconds an item stays in workqueue
# TYPE workqueue_queue_duration_seconds histogram
workqueue_queue_duration_seconds_sum{controller="NodeModulesConfig",name="NodeModulesConfig"} 8
workqueue_queue_duration_seconds_count{controller="NodeModulesConfig",name="NodeModulesConfig"} 40
workqueue_queue_duration_seconds_sum{name="ModuleReconciler"} 1.5
workqueue_queue_duration_seconds_count{name="ModuleReconciler"} 3
# HELP workqueue_work_duration_seconds How long in seconds processing an item takes.
# TYPE workqueue_work_duration_seconds histogram
workqueue_work_duration_seconds_sum{controller="NodeModulesConfig",name="NodeModulesConfig"} 2
workqueue_work_duration_seconds_count{controller="NodeModulesConfig",name="NodeModulesConfig"} 40
# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 180
"""


def test_reconciles_are_summed_over_results_and_cpu_is_read() -> None:
    work = parse_kmm_work(SCRAPE)
    assert work.reconciles == {"ModuleReconciler": 123.0, "NodeModulesConfig": 40.0}
    assert work.cpu_seconds == 12.5
    assert work.queued.mean("NodeModulesConfig") == 0.2
    assert work.queued.mean("ModuleReconciler") == 0.5  # an older controller-runtime: "name" only
    assert work.worked.mean("NodeModulesConfig") == 0.05
    assert work.worked.mean("ModuleReconciler") is None  # never reconciled: no mean, not zero


def test_the_work_between_two_scrapes() -> None:
    before = KmmWork({"ModuleReconciler": 100.0}, 10.0, queued=Durations({"M": 10.0}, {"M": 100.0}))
    after = KmmWork(
        {"ModuleReconciler": 123.0, "NodeModulesConfig": 40.0},
        12.5,
        queued=Durations({"M": 16.0}, {"M": 102.0}),
    )
    since = after.since(before)
    assert since == KmmWork(
        {"ModuleReconciler": 23.0, "NodeModulesConfig": 40.0},
        2.5,
        queued=Durations({"M": 6.0}, {"M": 2.0}),
    )
    assert since.queued.mean("M") == 3.0
