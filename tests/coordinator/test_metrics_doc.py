"""docs/metrics.md lists every metric the coordinator serves, and nothing it does not."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.coordinator_metrics import served_metric_names

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_the_metrics_table_is_what_the_coordinator_serves() -> None:
    table = [
        line
        for line in DOC.read_text().splitlines()
        if line.startswith(("| `gpuctl_", "| `process_"))
    ]
    documented = {
        name
        for line in table
        for name in re.findall(r"`((?:gpuctl|process)_\w+)`", line.split("|")[1])
    }
    served = served_metric_names()
    # The table names counters with _total and histograms by their base name.
    assert documented <= served, f"documented, not served: {sorted(documented - served)}"
    bases = {n for n in served if not n.endswith(("_bucket", "_sum", "_count"))}
    undocumented = {n for n in bases if n not in documented and f"{n}_total" not in documented}
    assert not undocumented, f"served, not in docs/metrics.md: {sorted(undocumented)}"
