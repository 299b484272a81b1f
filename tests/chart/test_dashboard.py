"""The chart's Grafana dashboard (metrics.grafanaDashboard): a ConfigMap the Grafana sidecar
picks up, holding valid dashboard JSON whose every query is valid PromQL (promtool checks it
as a recording rule) and reads only metrics the coordinator serves."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.harness.prometheus import promtool_binary
from tests.support.coordinator_metrics import metric_names_in, served_metric_names
from tests.support.helm import Helm, find

# Grafana's built-in interval variables, as PromQL durations for promtool.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(tmp_path_factory.mktemp("helm"))


def dashboard(helm: Helm, **dashboard_values: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    values = {"metrics": {"grafanaDashboard": {"enabled": True, **dashboard_values}}}
    config_map = find(helm.template(values), "ConfigMap", "-dashboard")
    return config_map, json.loads(config_map["data"]["gpuctl.json"])


def queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    found = [
        (panel["title"], target["expr"])
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            inner = query.removeprefix("label_values(").rsplit(",", 1)[0]
            found.append((f"variable {variable['name']}", inner))
    return found


def as_promql(expr: str) -> str:
    """Grafana's variables replaced by what they expand to (a regexp matcher's `.*`)."""
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr.replace("$gpudriver", ".*")


def test_no_dashboard_unless_asked(helm: Helm) -> None:
    assert not [o for o in helm.template() if o["kind"] == "ConfigMap" and "dashboard" in str(o)]


def test_the_sidecar_label_and_namespace(helm: Helm) -> None:
    config_map, board = dashboard(helm)
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == "gpuctl-system"
    assert board["uid"] == "gpuctl-overview"
    config_map, _ = dashboard(helm, namespace="monitoring", labels={"dashboards": "gpu"})
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["labels"]["dashboards"] == "gpu"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"  # helm merges maps
    config_map, _ = dashboard(helm, labels={"grafana_dashboard": None, "dashboards": "gpu"})
    assert "grafana_dashboard" not in config_map["metadata"]["labels"]


def test_every_query_is_promql_over_served_metrics(helm: Helm, tmp_path: Path) -> None:
    _, board = dashboard(helm)
    served = served_metric_names()
    found = queries(board)
    assert len(found) >= len(board["panels"])
    rules = []
    for index, (where, expr) in enumerate(found):
        read = metric_names_in(expr)
        assert read, where
        assert read <= served, f"{where} reads {sorted(read - served)}, not served"
        rules.append({"record": f"gpuctl:dashboard_query_{index}", "expr": as_promql(expr)})
    (tmp_path / "queries.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]})
    )
    result = subprocess.run(
        [promtool_binary(), "check", "rules", "queries.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_panels_do_not_overlap(helm: Helm) -> None:
    _, board = dashboard(helm)
    taken: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert max(x for x, _ in cells) < 24, panel["title"]
        assert not cells & taken, panel["title"]
        taken |= cells
