"""examples/gpu-daemons.yaml is wired to the pause: every DaemonSet in it selects on the
driver-ready label (by nodeSelector or required node affinity), and the example GPUDriver
declares each of them in rollout.pause."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpuctl.common import names
from gpuctl.rollout.input.settings import rollout_settings

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _selects_on_driver_ready(template: dict[str, Any]) -> bool:
    spec = template["spec"]
    if (spec.get("nodeSelector") or {}).get(names.DRIVER_READY_LABEL) == "true":
        return True
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = affinity.get("nodeSelectorTerms") or []
    wanted = {"key": names.DRIVER_READY_LABEL, "operator": "In", "values": ["true"]}
    return bool(terms) and all(wanted in (t.get("matchExpressions") or []) for t in terms)


def test_every_example_daemon_selects_on_driver_ready_and_is_declared_pausable() -> None:
    daemons = list(yaml.safe_load_all((EXAMPLES / "gpu-daemons.yaml").read_text()))
    assert [d["kind"] for d in daemons] == ["DaemonSet", "DaemonSet"]
    for daemon in daemons:
        assert _selects_on_driver_ready(daemon["spec"]["template"]), daemon["metadata"]
    (driver,) = yaml.safe_load_all((EXAMPLES / "xe-driver-prebuilt-image.yaml").read_text())
    declared = rollout_settings(driver["spec"]).pause.daemon_sets
    assert declared == {f"{d['metadata']['namespace']}/{d['metadata']['name']}" for d in daemons}
