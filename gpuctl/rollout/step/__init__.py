"""The rollout pipeline's third stage: each node's step in its phase, one place per phase.

phases.py is the table: `own_step` hands a node to its phase's function. The in-progress
phases have a module each (checking.py, draining.py, preparing.py, loading.py, verifying.py);
reboots.py handles a node's boot (Done, a reboot taken up in any phase, Verifying again after
one). writes.py holds the step's result and the Node writes every step makes; the checks the
steps share are preflight.py, pause.py, gpu_clients.py, kernel_proof.py and worker_hold.py.
"""
