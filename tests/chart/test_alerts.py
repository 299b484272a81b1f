"""The chart's PrometheusRule (metrics.prometheusRule): rendered by helm, checked by promtool
(`check rules`: valid PromQL and templates) and unit-tested by it (`test rules` over
tests/chart/alerts_test.yaml's synthetic series), and every metric it reads is one the
coordinator serves."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.harness.prometheus import promtool_binary
from tests.support.coordinator_metrics import metric_names_in, served_metric_names
from tests.support.helm import Helm, find

HERE = Path(__file__).resolve().parent
ALERTS = [
    "GpuctlNodeFailed",
    "GpuctlNodeBlocked",
    "GpuctlRolloutRolledBack",
    "GpuctlRolloutFailed",
    "GpuctlAgentsStale",
    "GpuctlNoLeader",
    "GpuctlCertificateExpiring",
    "GpuctlCoordinatorMemoryHigh",
]


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(tmp_path_factory.mktemp("helm"))


def rule_spec(helm: Helm, **rule_values: Any) -> dict[str, Any]:
    values = {"metrics": {"prometheusRule": {"enabled": True, **rule_values}}}
    rule = find(helm.template(values), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    spec: dict[str, Any] = rule["spec"]
    return spec


def promtool(*args: str, cwd: Path) -> str:
    result = subprocess.run(
        [promtool_binary(), *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"promtool {' '.join(args)}:\n{result.stdout}{result.stderr}"
    return result.stdout


def test_no_rule_unless_asked(helm: Helm) -> None:
    assert not [o for o in helm.template() if o["kind"] == "PrometheusRule"]


def test_the_alerts_pass_promtool_check_and_their_unit_tests(helm: Helm, tmp_path: Path) -> None:
    spec = rule_spec(helm)
    assert [r["alert"] for r in spec["groups"][0]["rules"]] == ALERTS
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec))
    shutil.copy(HERE / "alerts_test.yaml", tmp_path / "alerts_test.yaml")
    promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    out = promtool("test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert "SUCCESS" in out


def test_every_alert_reads_metrics_the_coordinator_serves(helm: Helm) -> None:
    served = served_metric_names()
    for rule in rule_spec(helm)["groups"][0]["rules"]:
        read = metric_names_in(rule["expr"])
        assert read, rule["alert"]
        assert read <= served, f"{rule['alert']} reads {sorted(read - served)}, not served"


def test_thresholds_come_from_the_values(helm: Helm) -> None:
    spec = rule_spec(
        helm,
        blockedFor="45m",
        staleAgentsFor="3m",
        noLeaderFor="1m",
        tlsExpiryDays=30,
        memoryPercent=75,
    )
    rules = {r["alert"]: r for r in spec["groups"][0]["rules"]}
    assert rules["GpuctlNodeBlocked"]["for"] == "45m"
    assert "more than 45m" in rules["GpuctlNodeBlocked"]["annotations"]["summary"]
    assert rules["GpuctlAgentsStale"]["for"] == "3m"
    assert rules["GpuctlNoLeader"]["for"] == "1m"
    assert rules["GpuctlCertificateExpiring"]["expr"].endswith(f"< {30 * 86400}")
    assert rules["GpuctlCoordinatorMemoryHigh"]["expr"].endswith("* 100 > 75")


def test_a_rule_without_the_metrics_service_is_refused(helm: Helm) -> None:
    values = {"metrics": {"service": {"enabled": False}, "prometheusRule": {"enabled": True}}}
    with pytest.raises(AssertionError, match=r"needs metrics\.service\.enabled"):
        helm.template(values)
