"""The rollout pipeline's last stage: status.rollout (status.py), the message and Events
(messages.py) and status.revisions (history.py), from the same facts (pass_report.py:
`report_pass`, and `report_refused` when spec.rollout cannot be applied)."""

from __future__ import annotations

from gpuctl.rollout.report.pass_report import report_pass, report_refused

__all__ = ["report_pass", "report_refused"]
