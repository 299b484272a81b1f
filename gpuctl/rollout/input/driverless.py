"""Whether a node's GPU serves nothing now, by its agent's latest live report (pure).

A node is driverless when the latest report its agent streamed, in the node's current boot,
shows no `xe` loaded and every Intel GPU function it found bound to no driver. Such a node has
no GPU capacity for a rollout to take away, so it is unavailable already: it starts first and
waits for no maxUnavailable slot (gpuctl/rollout/start/order.py). That is what keeps a node
from being left without a driver when KMM no longer loads one there at boot: a Node deleted
and registered again under its name (KMM's labels went with the old object, and its
NodeModulesConfig with them) that then reboots with the distro's `xe` blacklisted, or a new
node joining in the middle of a long rollout.

Unknown is never driverless: no report, a report from another boot (the agent's stream was
opened before the node's current boot), a report the coordinator may have missed the next of
(not in sync), no GPU found, or a module state the agent could not read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb

# A node's agent's latest report and the boot its stream was opened in.
LiveReport = tuple[str, report_pb.NodeReport]


def driverless(report: report_pb.NodeReport | None, report_boot: str, node_boot: str) -> bool:
    """`report` (made in boot `report_boot`; None: none, or not known to be the latest) shows
    the node, now in `node_boot`, with a GPU and no driver for it."""
    if report is None or not node_boot or report_boot != node_boot:
        return False
    if report.module.state != report_pb.Module.State.NOT_LOADED:
        return False
    return bool(report.devices) and all(not device.driver for device in report.devices)


def node_driverless(node: Mapping[str, Any], live: LiveReport | None) -> bool:
    """`driverless` for a Node (as the API returns it) and its agent's latest report."""
    boot = str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or "")
    report_boot, report = live if live is not None else ("", None)
    return driverless(report, report_boot, boot)
