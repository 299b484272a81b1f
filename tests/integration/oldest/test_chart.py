"""The chart on the oldest release: `helm install` (helm checks the chart's kubeVersion against
this server), every object accepted, the coordinator running under the chart's RBAC and flags,
and the admission guards type-checked and enforced by this release's ValidatingAdmissionPolicy
(v1, GA since 1.30) - the same tests as tests/integration/chart/, on this control plane."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.chart.test_admission_guards import (
    test_the_chart_installs_both_guards_enforces_them_and_keeps_them_on_uninstall,
)
from tests.integration.chart.test_install import (
    test_every_object_is_accepted_and_none_holds_a_key,
    test_the_coordinator_runs_under_the_charts_rbac_and_flags,
)
from tests.support.chart_release import Release

pytestmark = pytest.mark.integration

RERUN = (
    test_every_object_is_accepted_and_none_holds_a_key,
    test_the_coordinator_runs_under_the_charts_rbac_and_flags,
    test_the_chart_installs_both_guards_enforces_them_and_keeps_them_on_uninstall,
)


def test_the_agents_host_mounts_stay_recursively_read_only(release: Release) -> None:
    """1.31 has recursiveReadOnly as beta, on by default: the server keeps the field as the
    chart renders it (a server with the feature off drops it silently, and the host paths would
    be read-only only at their top)."""
    release.install()
    rendered = next(o for o in release.manifest() if o["kind"] == "DaemonSet")
    stored = release.get(rendered)
    assert stored is not None

    def mounts(daemon_set: dict[str, Any]) -> list[dict[str, Any]]:
        return list(daemon_set["spec"]["template"]["spec"]["containers"][0]["volumeMounts"])

    recursive = [m for m in mounts(rendered) if m.get("recursiveReadOnly")]
    assert recursive, "the chart renders no recursively read-only mount"
    kept = {m["mountPath"]: m.get("recursiveReadOnly") for m in mounts(stored)}
    assert {m["mountPath"]: m["recursiveReadOnly"] for m in recursive}.items() <= kept.items()
