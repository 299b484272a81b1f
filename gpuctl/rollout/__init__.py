"""The rollout's rules, pure and shared: the coordinator decides by them and `gpuctl rollout
plan` shows them.

decide.py is one pass, a pipeline of stages, each a sub-package:

- input/: the pass's facts as plain values, built from what was read;
- place/: each node's place in the rollout, before its step;
- step/: each node's step, one handler per phase (gpuctl/rollout/step/phases.py);
- fleet/: what holds the whole fleet (failure budget, pause, windows, Prometheus gate, soak,
  rollback);
- start/: who starts, within maxUnavailable and in the shared order;
- report/: status.rollout, its message, the Events and status.revisions.

Beside them: what a pass decides (decision.py) and asks the I/O layer to do (actions.py,
event_notes.py), why a rollout or a node waits (reasons.py), and each node's first move as
`gpuctl rollout plan` shows it, read off the decision (first_moves.py).
"""
