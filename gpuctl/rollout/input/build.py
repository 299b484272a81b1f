"""One pass's facts from what was read: API objects in, a RolloutInput out (pure).

The gatherer (gather.py) reads the caches, lists pods, asks the agents' call table and the
Prometheus gate; everything it read goes into a `Reads`, and `rollout_input` makes the
decision's input of it. Which nodes a pass considers, the Module's readiness, the image a
node's kernel mapping gives it, what KMM's worker Pods show: all decided here, on plain data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuctl.common import names
from gpuctl.common.gpu_claims import claims_on_nodes
from gpuctl.common.names import Phase
from gpuctl.common.nodes import node_labels, node_name
from gpuctl.common.unload_rule import modules_unloaded_with
from gpuctl.gpudriver import model, revisions
from gpuctl.gpudriver.kmm_templates import ModuleOf, TemplateError, kmm_image
from gpuctl.gpudriver.module_spec import module_name, ready_label, version_label
from gpuctl.gpudriver.targeting import mapping_for, node_kernel, wanted_nodes
from gpuctl.gpudriver.wanted_memo import WantedMemo
from gpuctl.rollout.input.driverless import LiveReport, node_driverless
from gpuctl.rollout.input.facts import CallState, GpuPod, KmmLabels, RolloutInput, node_facts
from gpuctl.rollout.input.gpu_pod_watch import pod_node
from gpuctl.rollout.input.image_probe import ImageProbe, node_probes
from gpuctl.rollout.input.kmm_activity import image_state, kmm_activity, module_worker_pods
from gpuctl.rollout.input.memo import NodeFactsMemo
from gpuctl.rollout.input.mid_step import finishes_loaded, mid_step
from gpuctl.rollout.input.pod_facts import PodFacts
from gpuctl.rollout.input.prometheus import GateResult
from gpuctl.rollout.input.settings import RolloutSettings
from gpuctl.rollout.input.signing_key import SigningCertificate


def module_container(module: Mapping[str, Any] | None) -> Mapping[str, Any]:
    loader = ((module or {}).get("spec") or {}).get("moduleLoader") or {}
    return dict(loader.get("container") or {})


def _pull_secret(module: Mapping[str, Any] | None) -> str:
    """The Module's imageRepoSecret ("" for none): KMM's Pods pull its images with it."""
    secret = ((module or {}).get("spec") or {}).get("imageRepoSecret") or {}
    return str(secret.get("name") or "")


def module_readiness(module: Mapping[str, Any] | None, name: str, target: str) -> str:
    """ "" when the Module exists, is not being deleted and asks for `target`; else why not."""
    if module is None:
        return f"waiting for Module {name} (KMM missing, or the Module being recreated)"
    if (module.get("metadata") or {}).get("deletionTimestamp"):
        return f"waiting for Module {name}: being deleted"
    if module_container(module).get("version") != target:
        return f"waiting for Module {name} to ask for version {target}"
    return ""


def considered(
    driver: str, nodes: Sequence[Mapping[str, Any]], wanted: frozenset[str]
) -> list[Mapping[str, Any]]:
    """The nodes a pass looks at: wanted, targeted (TARGET_LABEL=driver), or with its state."""
    out = []
    for node in nodes:
        labels = node_labels(node)
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        ours = names.STATE_LABEL in labels and annotations.get(names.GPUDRIVER) == driver
        if node_name(node) in wanted or labels.get(names.TARGET_LABEL) == driver or ours:
            out.append(node)
    return out


def pass_nodes(
    driver: Mapping[str, Any],
    all_nodes: Sequence[Mapping[str, Any]],
    target: str | None,
    *,
    finishing: bool = False,
    memo: WantedMemo | None = None,
) -> tuple[list[Mapping[str, Any]], frozenset[str]]:
    """The nodes a pass considers, and the wanted ones among them (through `memo`, the
    answers of the last pass kept). `finishing` (a refused rollout,
    gpuctl/rollout/place/refused.py): only the
    nodes mid-step, each wanted as its step says."""
    name = str(driver["metadata"]["name"])
    if finishing:
        mid = [n for n in all_nodes if mid_step(n, name)]
        return mid, frozenset(node_name(n) for n in mid if finishes_loaded(n))
    spec = driver.get("spec") or {}
    if not target:
        wanted: frozenset[str] = frozenset()
    elif memo is not None:
        wanted = memo.wanted(spec, all_nodes)
    else:
        wanted = wanted_nodes(spec, all_nodes)
    return considered(name, all_nodes, wanted), wanted


def target_images(spec: Mapping[str, Any], module: ModuleOf) -> Callable[[Mapping[str, Any]], str]:
    """The image KMM looks up for a node's kernel: the spec's kernel mapping's, its template
    variables filled in as KMM fills them ("" for none, or where KMM cannot fill them in);
    each distinct kernel looked up once per pass."""
    mappings = (spec.get("kernelModule") or {}).get("kernelMappings") or []
    images: dict[str, str] = {}

    def image(node: Mapping[str, Any]) -> str:
        kernel = node_kernel(node)
        if kernel not in images:
            mapping = mapping_for(kernel, mappings)
            template = str((mapping or {}).get("containerImage") or "")
            try:
                images[kernel] = kmm_image(template, kernel, module) if template else ""
            except TemplateError:
                images[kernel] = ""
        return images[kernel]

    return image


def kmm_labels(namespace: str, module: str) -> KmmLabels:
    """The node labels of a Module: gpuctl's version label and KMM's two readiness labels."""
    ready = ready_label(namespace, module)
    return KmmLabels(
        version=version_label(namespace, module),
        ready=ready,
        version_ready=f"{ready.removesuffix('.ready')}.version.ready",
    )


@dataclass(frozen=True)
class Reads:
    """Everything one pass read, as read. `nodes` are the considered ones (considered());
    `gpu_pods` has the nodes whose step looks at their GPU pods (None: unknown), or
    `node_pods` all their pods;
    `watched_pods` the Pods from the watch of each node reads_watched_pods() names (None: the
    watch cannot be trusted)."""

    driver: Mapping[str, Any]
    target: str | None
    settings: RolloutSettings
    previous: Mapping[str, Any]
    namespace: str
    nodes: Sequence[Mapping[str, Any]]
    wanted: frozenset[str]
    claims: Sequence[Mapping[str, Any]]
    claims_trouble: str
    module: Mapping[str, Any] | None
    images_config: Mapping[str, Any] | None
    now: datetime
    # Why images_config cannot be trusted ("" when it can: read, or KMM keeps none).
    images_unknown: str = ""
    gpu_pods: Mapping[str, tuple[GpuPod, ...] | None] = field(default_factory=dict)
    # Every pod (not finished) of the nodes whose step looks at them; where given, a node's
    # GPU pods are those among them (gpu_pods is for readers that know no more).
    node_pods: Mapping[str, tuple[PodFacts, ...] | None] = field(default_factory=dict)
    watched_pods: Mapping[str, Sequence[Mapping[str, Any]] | None] = field(default_factory=dict)
    calls: Mapping[str, Mapping[str, CallState]] = field(default_factory=dict)
    gate: GateResult | None = None
    observed_for: float = math.inf
    blocked_recheck_seconds: float = 30.0
    # The certSecrets the spec names (signing_key.cert_secrets), as read, by name.
    signing_certificates: Mapping[str, SigningCertificate] = field(default_factory=dict)
    # The GPUDriver's image probe Pods as listed, where the Pod watch cannot be trusted for a
    # node whose step reads them (None: not listed, or the list failed).
    listed_probes: Sequence[Mapping[str, Any]] | None = None
    # The boot KMM's NodeModulesConfig records its loader of the Module ran in, by node
    # (gpuctl/rollout/input/kmm_boots.py; "" none recorded); a node not in it: not read (unknown).
    kmm_boot_ids: Mapping[str, str] = field(default_factory=dict)
    # The kernel KMM's NodeModulesConfig configures the Module's loader for, by node (""
    # none; a node not in it: not read).
    kmm_kernels: Mapping[str, str] = field(default_factory=dict)
    # Each node's agent's latest live report and the boot its stream was opened in, where the
    # coordinator holds one it knows to be the latest (gpuctl/rollout/input/driverless.py).
    live_reports: Mapping[str, LiveReport] = field(default_factory=dict)


def reads_kmm_workers(node: Mapping[str, Any]) -> bool:
    """Whether the pass looks at KMM's worker Pods on the node: Loading (what KMM is doing
    there), or with KMM's worker held or let go (worker_hold.py)."""
    if _worker_held_or_let_go(node):
        return True
    return names.parse_phase(node_labels(node).get(names.STATE_LABEL)) is Phase.LOADING


# The phases whose step reads the node's image probes (gpuctl/rollout/step/kernel_proof.py): the
# checks make and read them, the KMM write deletes them.
PROBE_PHASES = frozenset({Phase.CHECKING, Phase.BLOCKED, Phase.DRAINING, Phase.PREPARING})


def reads_watched_pods(node: Mapping[str, Any]) -> bool:
    """Whether the pass reads the node's Pods from the Pod watch: KMM's worker Pods
    (reads_kmm_workers) or the GPUDriver's image probes (PROBE_PHASES)."""
    phase = names.parse_phase(node_labels(node).get(names.STATE_LABEL))
    return phase in PROBE_PHASES or reads_kmm_workers(node)


def _image_probes(
    node: Mapping[str, Any],
    watched: Sequence[Mapping[str, Any]] | None,
    driver: str,
    listed: Sequence[Mapping[str, Any]] | None,
) -> tuple[ImageProbe, ...] | None:
    """The node's image probes of `driver`, for a node in PROBE_PHASES (() for others), from
    the Pod watch or, where it cannot be trusted, the list; None when neither was read."""
    if names.parse_phase(node_labels(node).get(names.STATE_LABEL)) not in PROBE_PHASES:
        return ()
    if watched is not None:
        return node_probes(watched, driver)
    if listed is None:
        return None
    called = node_name(node)
    return node_probes((p for p in listed if pod_node(p) == called), driver)


def _worker_held_or_let_go(node: Mapping[str, Any]) -> bool:
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return names.KMM_WORKER_HELD in annotations or names.KMM_WORKER_RELEASED in annotations


def _unfinished_workers(
    node: Mapping[str, Any], workers: Sequence[Mapping[str, Any]]
) -> tuple[str, ...]:
    """KMM's worker Pods on a node whose KMM worker is held or was let go (worker_hold.py)
    that have not succeeded nor are being deleted; () for other nodes."""
    if not _worker_held_or_let_go(node):
        return ()
    return tuple(
        sorted(
            str(pod["metadata"]["name"])
            for pod in workers
            if (pod.get("status") or {}).get("phase") != "Succeeded"
            and not pod["metadata"].get("deletionTimestamp")
        )
    )


def _kmm_acts(node: Mapping[str, Any], phase: Phase | None) -> bool:
    """Whether what KMM does on the node is told (kmm_activity): Loading, or Verifying after a
    reboot with KMM's worker let go (reboots.py)."""
    if phase is Phase.LOADING:
        return True
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return phase is Phase.VERIFYING and names.REBOOTED in annotations


def _gpu_pods(pods: Sequence[PodFacts], resources: Sequence[str]) -> tuple[GpuPod, ...]:
    """The GPU pods among a node's pods, under the GPUDriver's rollout.gpuResources."""
    return tuple(GpuPod(p.namespace, p.name) for p in pods if p.uses_gpu(resources))


def rollout_input(reads: Reads, memo: NodeFactsMemo | None = None) -> RolloutInput:
    """The decision's input of one pass's reads; with a `memo` (gpuctl/rollout/input/memo.py), a
    node whose
    facts would be built as the last pass built them gets that pass's NodeFacts again."""
    name = str(reads.driver["metadata"]["name"])
    spec = reads.driver.get("spec") or {}
    module = module_name(name)
    claims = claims_on_nodes(reads.claims, list(reads.nodes))
    image_of = target_images(spec, ModuleOf(module, reads.namespace))
    images_config = reads.images_config
    make_facts = node_facts if memo is None else memo.node_facts
    facts = []
    for node in reads.nodes:
        called = node_name(node)
        watched = reads.watched_pods.get(called)
        workers = module_worker_pods(watched or [], reads.namespace, module)
        activity = ""
        image = image_of(node)
        phase = names.parse_phase(node_labels(node).get(names.STATE_LABEL))
        if _kmm_acts(node, phase) and watched is not None:
            activity = kmm_activity(
                workers, image=image, state_of_image=image_state(images_config, image)
            )
        pods = reads.node_pods.get(called, ())
        gpu = reads.gpu_pods.get(called, ())
        if called in reads.node_pods:
            gpu = None if pods is None else _gpu_pods(pods, reads.settings.gpu_resources)
        facts.append(
            make_facts(
                node,
                gpu_pods=gpu,
                pods=pods or (),
                claims=claims.get(called, ()),
                calls=reads.calls.get(called, {}),
                wanted=called in reads.wanted,
                claims_unknown=reads.claims_trouble,
                target_image=image,
                image_state=image_state(images_config, image),
                kmm_activity=activity,
                unfinished_workers=_unfinished_workers(node, workers) if watched else (),
                image_probes=_image_probes(node, watched, name, reads.listed_probes),
                kmm_boot_id=reads.kmm_boot_ids.get(called),
                kmm_kernel=reads.kmm_kernels.get(called),
                driverless=node_driverless(node, reads.live_reports.get(called)),
            )
        )
    if memo is not None:
        memo.keep_only([n.name for n in facts])
    kernel_module = spec.get("kernelModule") or {}
    modprobe = module_container(reads.module).get("modprobe") or {}
    target = reads.target
    waiting_for_module = module_readiness(reads.module, module, target) if target else ""
    module_driver = kernel_module.get("moduleName") or modprobe.get("moduleName")
    loading_order = kernel_module.get("modulesLoadingOrder") or modprobe.get("modulesLoadingOrder")
    return RolloutInput(
        driver_name=name,
        target_version=target,
        settings=reads.settings,
        module_driver=str(module_driver or model.DEFAULT_MODULE_NAME),
        kmm=kmm_labels(reads.namespace, module),
        module_ready=not waiting_for_module,
        module_wait_reason=waiting_for_module,
        resumed_version=resumed_version(reads.driver),
        nodes=facts,
        now=reads.now,
        observed_for=reads.observed_for,
        previous_status=reads.previous,
        blocked_recheck_seconds=reads.blocked_recheck_seconds,
        unloaded_with=tuple(modules_unloaded_with(loading_order)),
        module_version=str(kernel_module.get("version") or ""),
        revisions=revisions.of_status(reads.driver),
        kernel_module=dict(kernel_module),
        rollback=revisions.read_rollback(reads.driver),
        gate=reads.gate,
        signing_certificates=reads.signing_certificates,
        images_unknown=reads.images_unknown,
        image_pull_secret=_pull_secret(reads.module),
    )


def resumed_version(driver: Mapping[str, Any]) -> str:
    annotations = (driver.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(names.RESUMED_VERSION, ""))
