"""The rollout pipeline's third stage: each node's step in its phase, one place per phase.

phases.py is the table: `own_step` hands a node to its phase's function. The in-progress
phases have a module each (checking.py, draining.py, preparing.py, loading.py, verifying.py);
reboots.py handles a node's boot (Done, a reboot taken up in any phase, Verifying again after
one). writes.py holds the Node writes every step makes; the checks the steps share are
preflight.py, pause.py, gpu_clients.py, kernel_proof.py and worker_hold.py (whose
`holds_let_go_first` orders a pass's writes), and the soak's baseline a Done write records is
soak_baseline.py.
"""

from __future__ import annotations

from gpuctl.rollout.step.worker_hold import holds_let_go_first

__all__ = ["holds_let_go_first"]
