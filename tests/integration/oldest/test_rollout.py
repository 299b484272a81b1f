"""One rollout on the oldest release, with KMM's real operator (v2.6.0) and a busy node: the
node whose render node a process holds open is Blocked and keeps its driver while the others
roll, and finishes once the process lets go - the same test as tests/integration/rollout/'s, on
this control plane. RolloutRig.close asserts no unload of a busy node was recorded."""

from __future__ import annotations

import pytest

from tests.integration.rollout.test_end_to_end import (
    test_an_open_render_fd_blocks_its_node_the_rest_proceed_and_closing_it_lets_it_finish,
)

pytestmark = pytest.mark.integration

RERUN = (test_an_open_render_fd_blocks_its_node_the_rest_proceed_and_closing_it_lets_it_finish,)
