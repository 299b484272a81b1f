"""A reload flips only on proof that its image holds the node's kernel's modules (pure).

KMM's `Exists` only says the image pulls (image_probe.py): the flip of a reload (a node KMM
has loaded at another version; writes.image_not_ready's condition) unloads the old module
at once, and KMM's loader then copies `/opt/lib/modules/<kernel>` out of the image, failing for
ever where it is missing. So, once KMM says `Exists`, the check also waits for the image's
probe Pod on the node (`kernel_proof`): it is made when missing, and

- Succeeded: the image holds the folder; the check goes on;
- its container exited otherwise: Blocked at once (`image-lacks-kernel`), the image and the
  kernel named, nothing unloaded; the Blocked node runs the probe again every
  blocked_recheck_seconds (`rechecks`), so a fixed image pushed under the same tag lets it go
  on by itself;
- anything else (not made yet, pulling, running, ended without an answer, the Pod watch not
  trusted): no proof. The check waits up to `timeouts.check`, then Blocks (`image-not-ready`)
  saying what the probe is doing. Unknown never counts as proof.

A node's KMM write deletes its probes (`probes_done`); probes about another image or kernel
are deleted as they are found.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuctl.common import timestamps
from gpuctl.rollout.actions import Action, DeleteImageProbe, ProbeImage
from gpuctl.rollout.input.facts import NodeFacts, RolloutInput
from gpuctl.rollout.input.image_probe import ImageProbe, ProbeOutcome, modules_folder, probe_name
from gpuctl.rollout.reasons import Block, BlockKind
from gpuctl.rollout.step.writes import image_not_ready, removing


@dataclass(frozen=True)
class KernelProof:
    """What the image's probe says for a node's reload: `block` None when proven (or no proof
    is needed); `proven_missing` when the block stands at once; `probe` the probe read."""

    block: Block | None = None
    proven_missing: bool = False
    actions: tuple[Action, ...] = ()
    probe: ImageProbe | None = None


NOT_NEEDED = KernelProof()


def kmm_kernel(node: NodeFacts) -> str:
    """The kernel KMM's loader copies the modules of: nodeInfo.kernelVersion less one '+'."""
    return node.kernel_version.removesuffix("+")


def needs_proof(inp: RolloutInput, node: NodeFacts) -> bool:
    """A reload KMM would act on (as image_not_ready), of an image the mapping names."""
    version = inp.target_for(node)
    loaded = node.labels.get(inp.kmm.version, "")
    if removing(version) or not loaded or loaded == version:
        return False
    return node.target_label == inp.driver_name and bool(node.target_image)


def _stale(node: NodeFacts, keep: str) -> tuple[Action, ...]:
    return tuple(
        DeleteImageProbe(node.name, probe.name)
        for probe in node.image_probes or ()
        if probe.name != keep and not probe.deleting
    )


def kernel_proof(inp: RolloutInput, node: NodeFacts) -> KernelProof:
    """Whether the node's reload may flip on what its image's probe says (module docstring)."""
    if not needs_proof(inp, node):
        return NOT_NEEDED
    image, kernel = node.target_image, kmm_kernel(node)
    if not kernel:
        return _waiting(inp, node, "the Node reports no kernel version")
    if node.image_probes is None:
        why = "the coordinator's Pod watch cannot be trusted now (its probe is not read)"
        return _waiting(inp, node, why)
    name = probe_name(inp.driver_name, node.name, image, kernel)
    stale = _stale(node, name)
    probe = next((p for p in node.image_probes if p.name == name), None)
    if probe is None:
        made = ProbeImage(node.name, image, kernel, inp.image_pull_secret)
        return _waiting(inp, node, f"its probe Pod {name} is being made", (*stale, made))
    if probe.deleting:
        return _waiting(inp, node, f"its probe Pod {name} is being deleted, to run again", stale)
    return _probe_says(inp, node, probe, stale)


def _unloads(inp: RolloutInput, node: NodeFacts) -> str:
    return f"the reload would unload {node.labels.get(inp.kmm.version, '')}"


def _waiting(
    inp: RolloutInput, node: NodeFacts, why: str, actions: tuple[Action, ...] = ()
) -> KernelProof:
    """No proof yet: the check waits, then blocks with these words."""
    folder = modules_folder(kmm_kernel(node))
    words = (
        f"not proven that image {node.target_image} holds {folder}: {why}; "
        f"{_unloads(inp, node)} first"
    )
    return KernelProof(Block(BlockKind.IMAGE_NOT_READY, words), actions=actions)


def _probe_says(
    inp: RolloutInput, node: NodeFacts, probe: ImageProbe, stale: tuple[Action, ...]
) -> KernelProof:
    """The proof of the node's own probe, by its outcome."""
    name = probe.name
    if probe.outcome is ProbeOutcome.HOLDS:
        return KernelProof(actions=stale, probe=probe)
    if probe.outcome is ProbeOutcome.LACKS:
        kernel = kmm_kernel(node)
        words = (
            f"image {node.target_image} lacks {modules_folder(kernel)}: KMM's copy of the "
            f"node's kernel {kernel} out of it (probe Pod {name} on the node) ended with "
            f"{probe.words}; {_unloads(inp, node)} and KMM's loader would fail for ever; push "
            "the image built for that kernel, or fix the kernel mapping"
        )
        block = Block(BlockKind.IMAGE_LACKS_KERNEL, words)
        return KernelProof(block, proven_missing=True, actions=stale, probe=probe)
    if probe.outcome is ProbeOutcome.UNDECIDED:
        why = f"its probe Pod {name} ended without an answer ({probe.words}); it runs again"
        return _waiting(inp, node, why, (*stale, DeleteImageProbe(node.name, name)))
    if probe.outcome is ProbeOutcome.CANNOT_PULL:
        why = f"the node cannot pull it (probe Pod {name}: {probe.words})"
    else:
        why = f"its probe Pod {name} is running"
    waiting = _waiting(inp, node, why, stale)
    return KernelProof(waiting.block, actions=stale, probe=probe)


def blocked_by_probe(inp: RolloutInput, node: NodeFacts) -> Block | None:
    """What keeps a Blocked node blocked by its probe: only a proven lack (while a probe runs
    again, the node keeps its reason)."""
    proof = kernel_proof(inp, node)
    return proof.block if proof.proven_missing else None


def rechecks(inp: RolloutInput, node: NodeFacts) -> tuple[tuple[Action, ...], float | None]:
    """A Blocked node's probe work: the probe made when missing, stale ones deleted, and a
    proven lack run again once blocked_recheck_seconds have passed since it ended (a fixed
    image may have been pushed under the same tag). Returns the actions and the seconds until
    the next run is due (None: nothing due later)."""
    if image_not_ready(inp, node) is not None:
        return (), None  # KMM has not found the image: nothing to probe yet
    proof = kernel_proof(inp, node)
    probe = proof.probe
    if not proof.proven_missing or probe is None:
        return proof.actions, None
    ended = timestamps.parse_or_none(probe.finished_at)
    age = (inp.now - ended).total_seconds() if ended is not None else inp.blocked_recheck_seconds
    if age >= inp.blocked_recheck_seconds:
        return (*proof.actions, DeleteImageProbe(node.name, probe.name)), None
    return proof.actions, inp.blocked_recheck_seconds - age


def probes_done(node: NodeFacts) -> tuple[Action, ...]:
    """The node's probes, deleted with its KMM write: their answer was used."""
    return tuple(
        DeleteImageProbe(node.name, probe.name)
        for probe in node.image_probes or ()
        if not probe.deleting
    )
