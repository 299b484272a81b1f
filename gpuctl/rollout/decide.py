"""The rollout decision for one GPUDriver: a pure function from facts to actions and status.

One pass is a pipeline of stages, each a sub-package of gpuctl/rollout:

1. input/: the pass's facts, built from what was read (gpuctl/rollout/input/build.py) before
decide() runs; 2. place/: each node in its place (gpuctl/rollout/place/node_place.py): a node not
yet in its place is put
   there (gpuctl/rollout/place/placement.py: a node Done at an older version is Pending without a
   write, placement.waits_unwritten), a reboot KMM's loader ran in is taken up first, a node
   mid-step for another GPUDriver is left to it (gpuctl/rollout/place/refused.py);
3. step/: each node in its place takes its phase's step (gpuctl/rollout/step/phases.py: one handler
per
   phase; a node in a step about another version than its own goes back to Checking);
4. fleet/: what holds the whole fleet (gpuctl/rollout/fleet/pass_holds.py: the failure budget, a
pause, the
   hold after the first node, the windows, the Prometheus gate, the Module, a soak, a
   rollback);
5. start/: unless held, new nodes start within maxUnavailable in the shared order
   (gpuctl/rollout/start/starts.py), and Blocked ones are asked again;
6. report/: the status, its message, Events and revisions (gpuctl/rollout/report/pass_report.py),
from the
   same facts.

A node Failed at the target after its KMM write rolls the GPUDriver back under onNodeFailure:
Rollback (gpuctl/rollout/fleet/rollback.py). What each rule is and why is in docs/rollout.md ("What
happens to each node" and the sections after it).

The coordinator acts on the Decision (coordinator/rollout/act.py); `gpuctl rollout plan`
renders it (first_moves.py). One decision, two callers.
"""

from __future__ import annotations

from gpuctl.common.names import Phase
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.fleet.pass_holds import fleet_holds
from gpuctl.rollout.fleet.rollback import rollback
from gpuctl.rollout.input.facts import RolloutInput
from gpuctl.rollout.input.settings import SettingsError, max_unavailable
from gpuctl.rollout.place.node_place import place_node
from gpuctl.rollout.reasons import Hold, HoldKind
from gpuctl.rollout.report.pass_report import report_pass
from gpuctl.rollout.report.status import RolloutCounts, rollout_status
from gpuctl.rollout.start.starts import start_nodes
from gpuctl.rollout.step.worker_hold import holds_let_go_first


def decide(inp: RolloutInput) -> Decision:
    """Everything to do for one GPUDriver's rollout now."""
    decision = _decide(inp)
    decision.actions = holds_let_go_first(inp, decision.actions)
    return decision


def _decide(inp: RolloutInput) -> Decision:
    decision = Decision()
    nodes = {n.name: n for n in sorted(inp.nodes, key=lambda n: n.name)}
    phases: dict[str, Phase] = {}
    versions: dict[str, str] = {}
    targets: dict[str, str] = {}
    for name, node in nodes.items():
        placed = place_node(inp, node, decision)
        if placed is not None:
            phases[name], versions[name] = placed
            targets[name] = inp.target_for(node)
    decision.node_phases, decision.node_versions = phases, versions
    if not phases and not inp.target_version:
        return decision
    counts = RolloutCounts.of(phases, versions, targets)
    try:
        bound = max_unavailable(inp.settings.max_unavailable, counts.total + counts.removing)
    except SettingsError as err:
        refused = Hold(HoldKind.REFUSED, str(err))
        decision.status = rollout_status(inp, phases, counts, str(err), refused)
        return decision
    window, gates = fleet_holds(inp, decision, nodes=nodes, phases=phases, counts=counts)
    staying = {name: nodes[name] for name in phases}
    held_back = start_nodes(inp, staying, phases, decision, gates=gates, bound=bound)
    report_pass(
        inp,
        decision,
        phases=phases,
        counts=counts,
        gates=gates,
        bound=bound,
        held_back=held_back,
        window=window,
        rollout=[nodes[name] for name in phases],
    )
    decision.rollback = rollback(inp, nodes, phases, versions)
    return decision
