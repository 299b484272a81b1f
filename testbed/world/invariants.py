"""What must hold through a world run, checked all along (testbed/world/run.py).

On every Node watch event (`bound`, run by the NodeWatch) and every half second (`Checks.poll`,
over the watch's nodes and the fake hosts):

1. no `modprobe -r` or reload of `xe` on a node whose GPU is in use: the kernel boundary under
   KMM's worker records every attempt (`Checks.kernel` reads it), but a race no controller can
   win, which the kernel refuses (`Checks.excused`, below);
2. no node is left without the driver it had unless it is Blocked or Failed (with a reason),
   in a step, not Ready (rebooting), no longer wanted, or opted out by the admin with gpuctl's
   reason saying it has no driver (`driverless`);
3. a node is Done only if the agent verified the target in its current boot
   (`done_unverified`), and `gpuctl.dev/driver-ready` is on only on a node whose driver the
   agent verified in its current boot and whose GPU daemons are not paused for a step
   (`ready_unverified`);
4. at most maxUnavailable nodes are unavailable by the rollout's doing: cordoned by gpuctl, or in
   a step, unless a reboot put them there (how many nodes reboot at once is the world's choice,
   not the rollout's) (`bound`);
5. at the end, once the world is quiet, every node is Done at the target, or Failed with a
   reason (testbed/world/run.py `unsettled`);
6. a node Blocked by what holds its GPU (names.REASON_KIND open-clients) while a pod of the
   DaemonSet no rollout.pause declares holds it names that DaemonSet in its reason
   (`blocked_unnamed`; docs/gpu-daemons.md: "each named"); that it is never unloaded is 1.

2, 3 and 6 describe states the coordinator leaves only once it has seen the event that made them
(a reboot makes every Done node "unverified" until the coordinator reads the new boot): a node
breaks them when it stays so for REACTION_SECONDS, measured from when the check first saw it.

1 has the same kind of limit. A host process can open the device at any moment: after the
coordinator's check and before KMM's worker runs `modprobe -r` (gpuctl/rollout/step/
worker_hold.py), or right after a reboot the coordinator could not see yet (no leader for a
Lease's time, a kubelet Ready at once: docs/reboots.md "What remains"). No controller can take
back a decision made a moment before the open, and the kernel refuses such an unload (a DRM
file holds a reference on its driver's module: "Module xe is in use"). What gpuctl owes is to
see the holder and hold KMM's worker off before it tries again. So a refused unload within
RACE_SECONDS of a holder's open on that node is counted as raced (`WorldReport.raced`), not
as a breach; an unload that succeeded on a busy node, or one tried later, is a breach.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuctl.common import names
from gpuctl.rollout.place.placement import DRIVERLESS_OPTED_OUT
from testbed.fakehost import FakeHost
from testbed.harness.kubelet.record import KernelCall

# How long the coordinator may take to act on what it saw (a leader failover included, its
# Lease of 4 s and a start on a loaded machine) before a lingering state counts as a breach.
REACTION_SECONDS = 30.0
# How long after a holder opened a node's device a refused unload there counts as raced.
RACE_SECONDS = REACTION_SECONDS
SETTLED_PHASES = frozenset({"Blocked", "Failed"})

Nodes = Mapping[str, Mapping[str, Any]]


def _meta(node: Mapping[str, Any]) -> tuple[Mapping[str, str], Mapping[str, str]]:
    meta = node.get("metadata") or {}
    return meta.get("labels") or {}, meta.get("annotations") or {}


def boot_of(node: Mapping[str, Any]) -> str:
    return str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID", ""))


def ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def cordoned(node: Mapping[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def verified_in_this_boot(node: Mapping[str, Any]) -> bool:
    _, notes = _meta(node)
    try:
        verified = json.loads(notes.get(names.VERIFIED_BOOT, "") or "{}")
    except ValueError:
        return False
    return (
        isinstance(verified, dict)
        and bool(boot_of(node))
        and verified.get("bootID") == boot_of(node)
    )


def done_unverified(node: Mapping[str, Any]) -> str:
    labels, _ = _meta(node)
    if labels.get(names.STATE_LABEL) == "Done" and not verified_in_this_boot(node):
        return "Done without the agent's verification in its current boot"
    return ""


# Phases a node is in with its GPU daemons paused (driver-ready off): from the write that starts
# its step (the one after the check) until it is verified, and after a failed step.
PAUSED_PHASES = frozenset({"Draining", "Preparing", "Loading", "Verifying", "Failed"})


def ready_unverified(node: Mapping[str, Any]) -> str:
    """driver-ready on a node whose driver the agent has not verified in its current boot, or
    in a phase that pauses its GPU daemons (docs/gpu-daemons.md). A Blocked or Pending node
    keeps it: its driver, the one verified, is untouched."""
    labels, _ = _meta(node)
    if labels.get(names.DRIVER_READY_LABEL) != names.DRIVER_READY_VALUE:
        return ""
    phase = labels.get(names.STATE_LABEL, "")
    if phase in PAUSED_PHASES:
        return f"{names.DRIVER_READY_LABEL} on in {phase}"
    if not verified_in_this_boot(node):
        return f"{names.DRIVER_READY_LABEL} on, not verified in its current boot"
    return ""


def driver_live(host: FakeHost) -> bool:
    initstate = host.real("sys/module/xe/initstate")
    return initstate.exists() and initstate.read_text().strip() == "live"


def driverless(node: Mapping[str, Any], host: FakeHost, wanted: bool) -> str:
    labels, notes = _meta(node)
    phase = labels.get(names.STATE_LABEL, "")
    if not wanted or not ready(node) or driver_live(host):
        return ""
    if names.parse_phase(phase) in names.IN_PROGRESS:
        return ""
    if phase in SETTLED_PHASES and notes.get(names.REASON):
        return ""
    if phase == "Skipped" and notes.get(names.REASON) == DRIVERLESS_OPTED_OUT:
        return ""  # the admin opted it out, and gpuctl says what that leaves it with
    return f"no live xe, {phase or 'no phase'} ({notes.get(names.REASON, 'no reason')!r})"


def unavailable_by_the_rollout(nodes: Nodes) -> set[str]:
    """Nodes cordoned by gpuctl or in a step, unless a reboot or the admin put them there, or
    the node's GPU served nothing when it started (names.STARTED_DRIVERLESS): a
    node whose reboot the rollout took up is held (cordoned, verified again) whatever
    maxUnavailable says, and the world, not the rollout, chose how many reboot at once; a node
    the admin had cordoned was unavailable already, and starts without taking a slot
    (gpuctl/rollout/start/order.py; its step says so from the write after its check on:
    names.CORDONED_BY_GPUCTL "false")."""
    out = set()
    for name, node in nodes.items():
        labels, notes = _meta(node)
        if names.REBOOT_TAKEN_UP in notes or names.REBOOTED in notes:
            continue
        if names.STARTED_DRIVERLESS in notes:
            continue  # its GPU served nothing: no capacity taken (rollout/input/driverless.py)
        ours = notes.get(names.CORDONED_BY_GPUCTL)
        if ours == "false" or (ours != "true" and cordoned(node)):
            continue  # the admin's cordon, before the step or in its check
        if ours == "true":
            out.add(name)
        if names.parse_phase(labels.get(names.STATE_LABEL)) in names.IN_PROGRESS:
            out.add(name)
    return out


# The Block kind of a node blocked by the processes holding its GPU (gpuctl/rollout/reasons.py).
OPEN_CLIENTS = "open-clients"


def blocked_unnamed(node: Mapping[str, Any], daemon_set: str) -> str:
    """A node whose GPU a pod of `daemon_set` ("DaemonSet ns/name", declared nowhere) holds:
    Blocked by its GPU's holders, its reason must name it."""
    labels, notes = _meta(node)
    if labels.get(names.STATE_LABEL) != "Blocked" or notes.get(names.REASON_KIND) != OPEN_CLIENTS:
        return ""
    reason = notes.get(names.REASON, "")
    if daemon_set in reason:
        return ""
    return f"Blocked ({OPEN_CLIENTS}) while {daemon_set}'s pod holds its GPU: {reason!r}"


def _nobody() -> set[str]:
    return set()


@dataclass
class Checks:
    """The invariants' state: which node has broken which lingering rule since when, and every
    breach (with what the run was doing: `now_doing()`)."""

    max_unavailable: int
    hosts: Mapping[str, FakeHost]
    wanted: Callable[[str], bool]
    now_doing: Callable[[], str]
    # Every holder's open so far: (node, time.time() just before it opened).
    opens: Sequence[tuple[str, float]]
    # "DaemonSet ns/name" of the GPU DaemonSet no rollout.pause declares, and the nodes its
    # pods hold the GPU of now (invariant 6).
    undeclared: tuple[str, Callable[[], set[str]]] = ("", _nobody)
    breaches: list[str] = field(default_factory=list)
    raced: list[str] = field(default_factory=list)
    _since: dict[tuple[str, str], float] = field(default_factory=dict)
    _reported: set[tuple[str, str]] = field(default_factory=set)
    _kernel_seen: int = 0
    _judged: set[KernelCall] = field(default_factory=set)

    def bound(self, nodes: Nodes) -> str:
        """Invariant 4, on every Node event (NodeWatch)."""
        unavailable = unavailable_by_the_rollout(nodes)
        if len(unavailable) > self.max_unavailable:
            return (
                f"{len(unavailable)} nodes unavailable by the rollout (maxUnavailable "
                f"{self.max_unavailable}) during {self.now_doing()}: {sorted(unavailable)}"
            )
        return ""

    def poll(self, nodes: Nodes, now: float) -> None:
        """Invariants 2, 3 and 6 over the nodes as the watch has them, at monotonic `now`."""
        seen: set[tuple[str, str]] = set()
        daemon_set, holds = self.undeclared
        held = holds()
        for name, node in nodes.items():
            host = self.hosts.get(name)
            found = {
                "done-unverified": done_unverified(node),
                "ready-unverified": ready_unverified(node),
                "driverless": driverless(node, host, self.wanted(name)) if host else "",
                "blocked-unnamed": blocked_unnamed(node, daemon_set) if name in held else "",
            }
            for rule, words in found.items():
                if not words:
                    continue
                key = (name, rule)
                seen.add(key)
                first = self._since.setdefault(key, now)
                if now - first >= REACTION_SECONDS and key not in self._reported:
                    self._reported.add(key)
                    self.breaches.append(
                        f"{name} {rule} for {now - first:.0f} s (since {self.now_doing()}): {words}"
                    )
        for key in set(self._since) - seen:
            del self._since[key]
            self._reported.discard(key)

    def excused(self, call: KernelCall) -> bool:
        """An unload on a busy node the kernel refused, within RACE_SECONDS of a holder's open
        there: the race the module docstring names."""
        return not call.succeeded and any(
            node == call.node and opened <= call.at < opened + RACE_SECONDS
            for node, opened in self.opens
        )

    def judged(self, call: KernelCall) -> bool:
        """The call is in the run's report already: raced, or a breach."""
        return call in self._judged

    def kernel(self, busy_unloads: Sequence[KernelCall]) -> None:
        """Invariant 1: every new unload attempt on a busy node the kernel boundary recorded."""
        for call in busy_unloads[self._kernel_seen :]:
            self._judged.add(call)
            if self.excused(call):
                self.raced.append(call.describe())
            else:
                doing = self.now_doing()
                self.breaches.append(f"kernel boundary during {doing}: {call.describe()}")
        self._kernel_seen = len(busy_unloads)
