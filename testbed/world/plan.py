"""A world run's plan and its schedule: which real-world events happen, to which node, when.

`schedule(plan)` is pure and seeded: the same plan gives the same events, so a breach is
replayed from its seed (or from the schedule written as JSON, `write_schedule`/`read_schedule`)
and its event index. Each event kind has a weight (how often it is drawn); an event names the
node it happens to (drawn from the fleet's node indexes, resolved to names by the run), a
`choice` in [0, 1) the run uses for the event's own variation (how long a kubelet takes to come
back, how slow KMM is), and the seconds to wait before it.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Every kind of event, and how often it is drawn against the others. What each does is
# testbed/world/events.py.
WEIGHTS: dict[str, float] = {
    # A node reboots at any moment of any phase, the distro's in-tree xe autoloaded and then
    # opened by a host daemon, autoloaded and idle, or blacklisted.
    "reboot-busy": 3.0,
    "reboot-idle": 2.0,
    "reboot-blacklisted": 2.0,
    # A node reboots into a new kernel the distro installed; the driver's images for it pushed
    # before, or later (the pipeline catches up).
    "reboot-new-kernel": 1.5,
    "image-pushed": 0.7,
    # A host process (ollama, a systemd service) opens the GPU, and later lets it go.
    "workload-start": 3.0,
    "workload-end": 3.0,
    # The admin cordons and uncordons; labels `gpuctl.dev/rollout: skip` and takes it off;
    "admin-cordon": 1.5,
    "admin-uncordon": 1.5,
    # The admin drains a node (`kubectl drain`: cordoned, its pods but the DaemonSets'
    # evicted); admin-uncordon ends it.
    "admin-drain": 1.0,
    # The node's GPU DaemonSets installed or uninstalled: XPU Manager, declared in the
    # GPUDriver's rollout.pause and selecting gpuctl.dev/driver-ready; an exporter declared
    # nowhere, holding the GPU of every node it runs on (testbed/world/daemons.py).
    "daemons-paused": 0.7,
    "daemons-undeclared": 0.5,
    "skip": 1.0,
    "unskip": 1.0,
    # The admin taints NoSchedule (the GPUDriver does not tolerate it: its driver comes off
    # through the checks) and takes the taint off.
    "taint": 0.7,
    "untaint": 0.7,
    # The admin takes the GPUDriver's label off a node (out of its selector) and puts it back.
    "relabel-out": 0.7,
    "relabel-in": 0.7,
    # `kubectl delete node`, and the kubelet registers it again under its name.
    "reregister": 1.0,
    # The GPUDriver moves to a new version, or its module's parameters change, mid-rollout;
    # the admin pauses and resumes, or takes it back to the previous revision.
    "version-change": 1.0,
    "parameters-change": 0.7,
    "pause-resume": 1.0,
    "undo": 0.5,
    # The GPUDriver comes to tolerate the admin's taint, or no longer; a kernel mapped to its
    # image by a literal mapping before the templated one.
    "tolerations-change": 0.5,
    "mapping-literal": 0.5,
    # KMM slow on a node (an image pull of seconds) from now on, or fast again; KMM's manager
    # and webhook killed and started again.
    "kmm-slow": 1.5,
    "kmm-restart": 0.7,
    # The infrastructure: the leading coordinator SIGKILLed; a node's agent restarted.
    "kill-leader": 1.0,
    # `helm upgrade` of gpuctl's chart: the coordinators, then the agents, rolled.
    "chart-upgrade": 0.5,
    "agent-restart": 1.0,
}
KINDS = tuple(WEIGHTS)


@dataclass(frozen=True)
class WorldPlan:
    seed: int
    events: int
    nodes: int = 20
    max_unavailable: int = 3
    # Seconds between events, drawn uniformly.
    gap: tuple[float, float] = (0.3, 2.0)
    weights: dict[str, float] = field(default_factory=lambda: dict(WEIGHTS))


@dataclass(frozen=True)
class Event:
    index: int
    kind: str
    node: int
    choice: float
    gap: float


class ScheduleError(ValueError):
    """A schedule file that cannot be replayed, and why."""


def schedule(plan: WorldPlan) -> list[Event]:
    """The plan's events, in order (pure: the seed decides everything)."""
    unknown = sorted(set(plan.weights) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown event kinds {unknown}; known: {', '.join(KINDS)}")
    if plan.nodes < 1 or plan.events < 0:
        raise ValueError(f"a world needs nodes and events, not {plan.nodes} and {plan.events}")
    rng = random.Random(plan.seed)  # noqa: S311 - a reproducible schedule, not secrecy
    kinds = [k for k in KINDS if plan.weights.get(k, 0) > 0]
    weights = [plan.weights[k] for k in kinds]
    return [
        Event(
            index=index,
            kind=rng.choices(kinds, weights)[0],
            node=rng.randrange(plan.nodes),
            choice=rng.random(),
            gap=rng.uniform(*plan.gap),
        )
        for index in range(plan.events)
    ]


def write_schedule(plan: WorldPlan, events: list[Event], file: Path) -> None:
    """The plan and its events as JSON, for `--replay`."""
    body = {"plan": asdict(plan), "events": [asdict(e) for e in events]}
    file.write_text(json.dumps(body, indent=1) + "\n")


def read_schedule(file: Path) -> tuple[WorldPlan, list[Event]]:
    """A schedule `write_schedule` wrote; ScheduleError says what is wrong with another."""
    try:
        body = json.loads(file.read_text())
        plan_fields = dict(body["plan"])
        plan_fields["gap"] = tuple(plan_fields["gap"])
        plan = WorldPlan(**plan_fields)
        events = [Event(**e) for e in body["events"]]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ScheduleError(f"{file}: not a world schedule: {err}") from err
    for event in events:
        if event.kind not in KINDS or not 0 <= event.node < plan.nodes:
            raise ScheduleError(f"{file}: event {event.index} cannot be replayed: {event}")
    return plan, events
