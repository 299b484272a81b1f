"""The chart gives the agent write access to the host's /sys only with
agent.allowNodeChanges (off by default), and then passes the flag that lets it write."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from agent.__main__ import build_parser

CHART = Path(__file__).resolve().parents[2] / "charts" / "gpuctl"
GUARDED = re.compile(r"\{\{- if \$a\.allowNodeChanges \}\}(.*?)\{\{- end \}\}", re.DOTALL)


def test_sys_is_writable_and_changes_allowed_only_when_the_value_says_so() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["agent"]["allowNodeChanges"] is False
    daemonset = (CHART / "templates" / "agent-daemonset.yaml").read_text()
    guarded = "\n".join(GUARDED.findall(daemonset))
    unguarded = GUARDED.sub("", daemonset)
    for needed in (
        "- --allow-node-changes",
        "- {name: host-sys, mountPath: /host/sys, mountPropagation: HostToContainer}",
        "hostPath: {path: /sys, type: Directory}",
    ):
        assert needed in guarded
        assert needed not in unguarded
    assert "readOnly" not in guarded
    assert "{name: host, mountPath: /host, readOnly: true" in unguarded
    args = build_parser().parse_args(["run", "--coordinator=c:1", "--allow-node-changes"])
    assert args.allow_node_changes is True
