"""Which Nodes are mid-step of a GPUDriver, read from the Node objects
(gpuctl/rollout/input/mid_step.py): those a refused rollout finishes, and at what."""

from __future__ import annotations

from gpuctl.common import names
from gpuctl.rollout.input.mid_step import finishes_loaded, mid_step
from tests.support.rollout_samples import raw_node as node


def test_only_this_gpudrivers_nodes_in_a_step_finish() -> None:
    for step in ("Checking", "Draining", "Preparing", "Loading", "Verifying"):
        assert mid_step(node("n", step), "gpu"), step
    for settled in ("Pending", "Blocked", "Failed", "Done", "Skipped", None):
        assert not mid_step(node("n", settled), "gpu"), settled
    assert not mid_step(node("n", "Draining", driver="other"), "gpu")


def test_a_node_finishes_loaded_unless_its_step_is_the_removal() -> None:
    assert finishes_loaded(node("n", "Loading", version="v1"))
    assert not finishes_loaded(node("n", "Loading", version=names.REMOVAL_VERSION))
    assert not finishes_loaded(node("n", "Loading", version=""))
