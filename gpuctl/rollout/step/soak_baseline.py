"""The soak's baseline (names.SOAK_BASELINE): what a node's Done write records from the report
that verified it (step/verifying.py), and what the soak compares later answers with
(gpuctl/rollout/fleet/soak.py). Pure."""

from __future__ import annotations

import json
from typing import Any

from gpuctl.common import names
from gpuctl.rollout.input.facts import NodeFacts, ReportFacts


def baseline(module_driver: str, report: ReportFacts) -> str:
    """The SOAK_BASELINE annotation of a node verified with `report`."""
    record: dict[str, Any] = {
        "bound": sorted(f.pci_address for f in report.bound_to(module_driver)),
        "driver": module_driver,
        "srcversion": report.srcversion,
        "tainted": report.kernel_tainted,
    }
    return json.dumps(record, separators=(",", ":"), sort_keys=True)


def read_baseline(node: NodeFacts) -> dict[str, Any] | None:
    try:
        record = json.loads(node.annotations.get(names.SOAK_BASELINE, ""))
    except ValueError:
        return None
    return record if isinstance(record, dict) else None
