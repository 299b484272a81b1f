"""The rollout pipeline's third stage: each node's step in its phase. phases.py holds the
handler of each phase (one function per phase); verifying.py the Verifying step,
reboots.py a node's boot (Done, and a reboot taken up in any phase); writes.py the
result and the Node writes every step makes; the checks a step makes are in
preflight.py, pause.py, gpu_clients.py, kernel_proof.py and worker_hold.py."""
