"""The rollout pipeline's first stage: one pass's facts as plain values (facts.py), built
from what was read (build.py, pass_setup.py, memo.py) with what each node's pods, agent
answers, records and KMM objects say (pod_facts.py, gpu_pod_watch.py, records.py,
kmm_boots.py, kmm_activity.py, image_probe.py, node_keys.py, signing_key.py, mid_step.py), the
Prometheus gate's answer (prometheus.py), and spec.rollout as the engine uses it (settings.py,
its maintenance windows in windows.py).

decide.py reads the facts (RolloutInput) and the bound on unavailable nodes from here."""

from __future__ import annotations

from gpuctl.rollout.input.facts import RolloutInput
from gpuctl.rollout.input.settings import SettingsError, max_unavailable

__all__ = ["RolloutInput", "SettingsError", "max_unavailable"]
