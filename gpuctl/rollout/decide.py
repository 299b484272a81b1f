"""The rollout decision for one GPUDriver: a pure function from facts to actions and status.

One pass is a pipeline of stages, each a sub-package of gpuctl/rollout that imports only the
stages before it (the layers contract in pyproject.toml):

1. input/: the pass's facts, built from what was read (gpuctl/rollout/input/build.py) before
   decide() runs;
2. place/: each node in its place (gpuctl/rollout/place/node_place.py): a node not yet in its
   place is put there (gpuctl/rollout/place/placement.py: a node Done at an older version is
   Pending without a write, placement.waits_unwritten), a reboot KMM's loader ran in is taken
   up first, a node mid-step for another GPUDriver is left to it
   (gpuctl/rollout/place/refused.py);
3. step/: each node in its place takes its phase's step (gpuctl/rollout/step/phases.py: one
   handler per phase; a node in a step about another version than its own goes back to
   Checking);
4. fleet/: what holds the whole fleet (gpuctl/rollout/fleet/pass_holds.py: the failure
   budget, a pause, the hold after the first node, the windows, the Prometheus gate, the
   Module, a soak);
5. start/: unless held, new nodes start within maxUnavailable in the shared order
   (gpuctl/rollout/start/starts.py), and Blocked ones are asked again;
6. report/: the status, its message, Events and revisions
   (gpuctl/rollout/report/pass_report.py), from the same facts.

A node Failed at the target after its KMM write rolls the GPUDriver back under onNodeFailure:
Rollback (gpuctl/rollout/fleet/rollback.py). What each rule is and why is in docs/rollout.md
("What happens to each node" and the sections after it).

The coordinator acts on the Decision (coordinator/rollout/act.py); `gpuctl rollout plan`
renders it (first_moves.py). One decision, two callers.
"""

from __future__ import annotations

from gpuctl.rollout import fleet, place, report, start, step
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.input import RolloutInput, SettingsError, max_unavailable


def decide(inp: RolloutInput) -> Decision:
    """Everything to do for one GPUDriver's rollout now."""
    decision = _decide(inp)
    decision.actions = step.holds_let_go_first(inp, decision.actions)
    return decision


def _decide(inp: RolloutInput) -> Decision:
    decision = Decision()
    placed = place.place_nodes(inp, decision)
    phases, counts = placed.phases, placed.counts
    if not phases and not inp.target_version:
        return decision
    try:
        bound = max_unavailable(inp.settings.max_unavailable, counts.total + counts.removing)
    except SettingsError as err:
        report.report_refused(inp, decision, phases=phases, counts=counts, why=str(err))
        return decision
    window, gates = fleet.fleet_holds(
        inp, decision, nodes=placed.nodes, phases=phases, counts=counts
    )
    held_back = start.start_nodes(inp, placed.staying, phases, decision, gates=gates, bound=bound)
    report.report_pass(
        inp,
        decision,
        phases=phases,
        counts=counts,
        gates=gates,
        bound=bound,
        held_back=held_back,
        window=window,
        rollout=list(placed.staying.values()),
    )
    decision.rollback = fleet.rollback(inp, placed.nodes, phases, placed.versions)
    return decision
