"""The chart's Kubernetes floor is the release tests/integration/oldest/ runs on.

Chart.yaml's `kubeVersion` is what admins read and what helm enforces; hack/kube/oldest/go.mod
pins the control plane the oldest-release tests build (hack/kube/ensure oldest). If one moved
without the other, the chart would promise a release no test runs on, or the tests would run on
a release the chart refuses. docs/deploying.md states the same floor.
"""

from __future__ import annotations

import re

import yaml

from tests.support.helm import CHART

REPO = CHART.parent.parent
OLDEST_GO_MOD = REPO / "hack" / "kube" / "oldest" / "go.mod"


def chart_floor() -> tuple[int, int]:
    kube_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    found = re.fullmatch(r">=\s*(\d+)\.(\d+)\.0-0", kube_version)
    assert found, f"Chart.yaml kubeVersion {kube_version!r} is not of the form '>=X.Y.0-0'"
    return int(found[1]), int(found[2])


def oldest_tested() -> tuple[int, int]:
    found = re.search(r"^\s*k8s\.io/kubernetes v(\d+)\.(\d+)\.\d+", OLDEST_GO_MOD.read_text(), re.M)
    assert found, f"{OLDEST_GO_MOD} pins no k8s.io/kubernetes release"
    return int(found[1]), int(found[2])


def test_the_charts_floor_is_the_oldest_release_the_tests_run_on() -> None:
    assert chart_floor() == oldest_tested(), (
        f"Chart.yaml kubeVersion floor {chart_floor()} != the release hack/kube/oldest/go.mod "
        f"builds for tests/integration/oldest/ {oldest_tested()}: move them together"
    )


def test_the_deploying_guide_states_the_same_floor() -> None:
    major, minor = chart_floor()
    text = (REPO / "docs" / "deploying.md").read_text()
    assert f"Kubernetes\n>= {major}.{minor}" in text or f"Kubernetes >= {major}.{minor}" in text
