"""A refused rollout's pure rules (gpuctl/rollout/place/refused.py): by which settings the
nodes finish, what the status says, and that another GPUDriver's step is left to it. Which
nodes finish, at what: tests/rollout/input/test_mid_step.py."""

from __future__ import annotations

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.decide import decide
from gpuctl.rollout.input.facts import node_facts
from gpuctl.rollout.input.settings import RolloutSettings, rollout_settings
from gpuctl.rollout.place.refused import (
    anothers_step,
    finishing_settings,
    refused_status,
)
from tests.support import rollout_samples as samples


def test_the_settings_start_nothing_and_keep_what_the_steps_run_by() -> None:
    spec = {
        "rollout": {
            "evictGPUPods": True,
            "onNodeFailure": "Rollback",
            "soakSeconds": 60,
            "timeouts": {"drain": "5m"},
            "maintenanceWindows": [{"days": ["Sat"], "start": "01:00", "duration": "2h"}],
        }
    }
    settings = finishing_settings(rollout_settings(spec))
    assert settings.paused
    assert (settings.maintenance_windows, settings.prometheus_gate) == ((), None)
    assert (settings.soak_seconds, settings.rolls_back) == (0.0, False)
    assert settings.evict_gpu_pods
    assert settings.timeouts.drain == 300.0
    defaults = finishing_settings(None)
    assert defaults.paused
    assert not defaults.evict_gpu_pods  # nothing the admin did not ask for is evicted
    assert defaults.timeouts == RolloutSettings().timeouts


def test_the_status_is_paused_with_why_and_names_each_node_still_finishing() -> None:
    nodes = [
        node_facts(samples.raw_node("b", "Loading")),
        node_facts(samples.raw_node("a", "Draining")),
        node_facts(samples.raw_node("c", "Done")),
    ]
    status = refused_status("v2", "no rollout: conflict", nodes)
    assert status == {
        "targetVersion": "v2",
        "state": "Paused",
        "holdKind": "Refused",
        "message": "no rollout: conflict; finishing the step already begun on a (Draining), "
        "b (Loading); no other node starts",
    }
    assert refused_status(None, "why", [])["targetVersion"] == names.REMOVAL_VERSION
    assert refused_status(None, "why", [])["message"] == "why"


def test_a_node_in_another_gpudrivers_step_is_left_to_it() -> None:
    theirs = samples.node(
        "n1",
        phase=Phase.DRAINING,
        annotations={names.GPUDRIVER: "newer"},
        unschedulable=True,
        labels=samples.loaded_labels(samples.OLD),
    )
    assert anothers_step(theirs, samples.DRIVER) == "newer"
    decision = decide(samples.rollout([theirs]))
    assert decision.actions == []
    mine = samples.node("n1", phase=Phase.DRAINING, annotations={names.GPUDRIVER: samples.DRIVER})
    assert anothers_step(mine, samples.DRIVER) == ""
    done = samples.node("n1", phase=Phase.DONE, annotations={names.GPUDRIVER: "newer"})
    assert anothers_step(done, samples.DRIVER) == ""  # not mid-step: the usual placement
