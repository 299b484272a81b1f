"""The Helm chart and the coordinator agree: its flags exist, its values parse."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from coordinator.main import parse_args

CHART = Path(__file__).resolve().parents[2] / "charts" / "gpuctl"


def test_chart_metadata_and_values_parse() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["name"] == "gpuctl"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["openshift"]["enabled"] is False
    assert values["coordinator"]["replicas"] >= 2


def test_every_flag_the_deployment_passes_exists() -> None:
    template = (CHART / "templates" / "coordinator-deployment.yaml").read_text()
    flags = re.findall(r"- (--[a-z-]+)=", template)
    assert "--namespace" in flags
    assert "--module-loader-service-account" in flags
    values = yaml.safe_load((CHART / "values.yaml").read_text())["coordinator"]
    sample = {
        "--lease-duration": values["leaderElection"]["leaseDuration"],
        "--renew-deadline": values["leaderElection"]["renewDeadline"],
        "--retry-period": values["leaderElection"]["retryPeriod"],
        "--log-level": values["logLevel"],
    }
    args = parse_args([f"{flag}={sample.get(flag, 'x')}" for flag in flags])
    assert args.lease_duration == 15
    assert args.namespace == "x"
