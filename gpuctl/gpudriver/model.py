"""The GPUDriver spec as pydantic models: the one source of truth for the CRD's schema.

hack/generate.py turns these models into the openAPIV3Schema of
charts/gpuctl/crds/gpudrivers.gpuctl.dev.yaml, so the schema the API server enforces and
the Python model the coordinator parses never drift. The CEL rules (`x-kubernetes-validations`)
are attached here too, beside the fields they check, so the API server rejects a bad object
with a clear message and no webhook is needed. Field names, meanings and defaults follow the
Intel GPU operator's `ClusterPolicy.spec.kernelModule` (intel/gpu-base-operator: its
OOTDRIVER.md and pull request #79, which added it).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from gpuctl.common.gpu_pods import DEFAULT_GPU_RESOURCES
from gpuctl.gpudriver.unknown_fields import known_only

DEFAULT_MODULE_NAME = "xe"

# Kernel module names are short; the bound keeps the CEL rules' cost estimate small.
ModuleNameStr = Annotated[str, Field(min_length=1, max_length=64)]

# kernelModule.version becomes part of the Module's KMM version, `<version>-<8 hex>`
# (module_spec.kmm_version), which KMM and the rollout write as a Node label value: at most 63
# characters of letters, digits, '.', '_' and '-', starting and ending with a letter or digit.
VERSION_MAX_LENGTH = 54
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
VERSION_MESSAGE = (
    "version must start with a letter or digit and hold only letters, digits, '.', '_' and "
    f"'-', at most {VERSION_MAX_LENGTH} characters (it becomes part of a Node label value)"
)
# A modprobe parameter: `name=value` or `name`, one argv entry each (no spaces or newlines).
PARAMETER_PATTERN = r"^[A-Za-z0-9_-]+(=[!-~]*)?$"
PARAMETER_MESSAGE = (
    "each parameter is name=value or name: a name of letters, digits, '_' and '-', and a "
    "value without spaces or newlines"
)
ParameterStr = Annotated[str, Field(min_length=1, max_length=256)]


def _cel(*rules: tuple[str, str]) -> dict[str, Any]:
    """Schema extra carrying CEL rules as (rule, message) pairs."""
    return {"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in rules]}


class _Model(BaseModel):
    """Base: camelCase on the wire, unknown fields refused (the API server prunes them; what
    is read back from a newer CRD is cleared of them first: unknown_fields.py)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class LocalObjectReference(_Model):
    """A reference to an object by name, in the coordinator's namespace."""

    name: str = Field(min_length=1, description="Name of the object.")


class RegistryTLS(_Model):
    """TLS options for a self-hosted registry (KMM's TLSOptions)."""

    insecure: bool | None = Field(default=None, description="Allow plain HTTP to the registry.")
    insecure_skip_tls_verify: bool | None = Field(
        default=None,
        alias="insecureSkipTLSVerify",
        description="Do not verify the registry's TLS certificate.",
    )


class BuildArg(_Model):
    """A build argument passed to the in-cluster image build."""

    name: str = Field(min_length=1, description="Build argument name.")
    value: str = Field(description="Build argument value.")


class Build(_Model):
    """KMM's in-cluster build: built and pushed to containerImage when the image is missing."""

    dockerfile_config_map: LocalObjectReference = Field(
        alias="dockerfileConfigMap",
        description="ConfigMap in the coordinator's namespace with the Dockerfile "
        "under the `dockerfile` key.",
    )
    build_args: list[BuildArg] | None = Field(
        default=None, alias="buildArgs", description="Build arguments."
    )
    secrets: list[LocalObjectReference] | None = Field(
        default=None,
        description="Build-time secrets (e.g. a private source repository); not used for "
        "registry authentication, which is spec.pullSecret.",
    )


# KMM's modprobe.dirName, which gpuctl always writes; the files to sign are under it.
KMM_DIR_NAME = "/opt"
SIGNED_FILES_RULE = f"self.filesToSign.all(f, f.startsWith('{KMM_DIR_NAME}/'))"
SIGNED_FILES_MESSAGE = (
    f"filesToSign must be paths in the image under {KMM_DIR_NAME}/ (KMM's dirName), e.g. "
    f"{KMM_DIR_NAME}/lib/modules/$KERNEL_FULL_VERSION/updates/xe.ko"
)
UNSIGNED_IMAGE_MESSAGE = (
    "a mapping that is signed and has no build needs sign.unsignedImage (its own or "
    "kernelModule.sign's): KMM signs that image and pushes the result to containerImage"
)


class Sign(_Model):
    """KMM's in-cluster signing of the driver's modules with the admin's key, for nodes that
    enforce module signatures (Secure Boot): KMM's `sign`, field for field."""

    model_config = ConfigDict(json_schema_extra=_cel((SIGNED_FILES_RULE, SIGNED_FILES_MESSAGE)))

    key_secret: LocalObjectReference = Field(
        alias="keySecret",
        description="Secret in the coordinator's namespace holding the private signing key "
        "under the data key `key` (KMM's keySecret).",
    )
    cert_secret: LocalObjectReference = Field(
        alias="certSecret",
        description="Secret in the coordinator's namespace holding the key's public "
        "certificate under the data key `cert`: the certificate the nodes trust (enrolled "
        "as a MOK, or in the kernel's keyring).",
    )
    files_to_sign: list[Annotated[str, Field(min_length=2, max_length=512)]] = Field(
        alias="filesToSign",
        min_length=1,
        max_length=64,
        description="Paths of the modules to sign inside the image, under /opt; KMM's "
        "template variables ($KERNEL_FULL_VERSION) may be used.",
    )
    unsigned_image: str | None = Field(
        default=None,
        alias="unsignedImage",
        min_length=1,
        description="The unsigned image KMM signs when the mapping has no build; the signed "
        "image is pushed to the mapping's containerImage.",
    )
    unsigned_image_registry_tls: RegistryTLS | None = Field(
        default=None,
        alias="unsignedImageRegistryTLS",
        description="Registry TLS options for pulling unsignedImage.",
    )


class KernelMapping(_Model):
    """Which driver image serves the kernels whose version matches `regexp`."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "has(self.containerImage) || has(self.build)",
                "containerImage or build must be set",
            ),
            (
                "has(self.containerImage)",
                "containerImage is required, also with build: KMM pushes the built image "
                "there and its Module API requires it",
            ),
        )
    )

    regexp: str = Field(
        min_length=1,
        description="Regular expression matched against the node's kernel version; "
        "anchor it (^...$) for exact matches.",
    )
    container_image: str | None = Field(
        default=None,
        alias="containerImage",
        min_length=1,
        description="Driver image, with an explicit tag or digest; KMM's template variables "
        "($KERNEL_FULL_VERSION, $MOD_NAME, ${VAR}) may be used.",
    )
    build: Build | None = Field(default=None, description="In-cluster build of the image.")
    sign: Sign | None = Field(
        default=None,
        description="In-cluster signing for this mapping's kernels; merged with "
        "kernelModule.sign as KMM merges them (this one's secrets and unsignedImage win, "
        "its filesToSign are added).",
    )
    registry_tls: RegistryTLS | None = Field(
        default=None,
        alias="registryTLS",
        description="Overrides kernelModule.registryTLS for this mapping.",
    )
    in_tree_modules_to_remove: list[ModuleNameStr] | None = Field(
        default=None,
        alias="inTreeModulesToRemove",
        description="Extra in-tree modules to unload for this mapping; moduleName is always "
        "prepended.",
    )


class KernelModule(_Model):
    """The out-of-tree driver KMM loads: a simplified KMM Module."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "!has(self.modulesLoadingOrder) || self.modulesLoadingOrder.size() >= 2",
                "modulesLoadingOrder must have at least 2 entries",
            ),
            (
                "!has(self.modulesLoadingOrder) || self.modulesLoadingOrder.size() == 0 || "
                "self.modulesLoadingOrder[0] == self.moduleName",
                "modulesLoadingOrder must start with moduleName",
            ),
            (
                "!has(self.modulesLoadingOrder) || self.modulesLoadingOrder.all(m, "
                "self.modulesLoadingOrder.filter(n, n == m).size() == 1)",
                "modulesLoadingOrder must not contain duplicates",
            ),
            (
                "self.kernelMappings.all(m, !(has(m.sign) || has(self.sign)) || has(m.build) "
                "|| (has(m.sign) && has(m.sign.unsignedImage)) "
                "|| (has(self.sign) && has(self.sign.unsignedImage)))",
                UNSIGNED_IMAGE_MESSAGE,
            ),
        )
    )

    module_name: str = Field(
        default=DEFAULT_MODULE_NAME,
        alias="moduleName",
        min_length=1,
        max_length=64,
        description="Kernel module to load; also always unloaded as the in-tree module first.",
    )
    version: str | None = Field(
        default=None,
        max_length=VERSION_MAX_LENGTH,
        description="The driver's version (its backport tag, e.g. v7.1.4.6_260728.7), which "
        "the rollout verifies on each node (optional). Any change of the driver's "
        "configuration, this included, is rolled out node by node. At most 54 characters: "
        "letters, digits, '.', '_', '-', starting with a letter or digit.",
        json_schema_extra=_cel((f"self.matches('{VERSION_PATTERN}')", VERSION_MESSAGE)),
    )
    kernel_mappings: list[KernelMapping] = Field(
        alias="kernelMappings",
        min_length=1,
        max_length=64,
        description="At least one kernel mapping.",
    )
    modules_loading_order: list[ModuleNameStr] | None = Field(
        default=None,
        alias="modulesLoadingOrder",
        max_length=32,
        description="Softdep-style loading order: moduleName first, at least 2 entries, "
        "no duplicates.",
    )
    parameters: list[ParameterStr] | None = Field(
        default=None,
        max_length=64,
        description='modprobe parameters of moduleName, e.g. ["max_vfs=7", "force_probe=*"]: '
        "each name=value or name, no spaces. Changing them is a configuration change, "
        "rolled out node by node like a new version.",
        json_schema_extra=_cel(
            (f"self.all(p, p.matches('{PARAMETER_PATTERN}'))", PARAMETER_MESSAGE)
        ),
    )
    firmware_path: str | None = Field(
        default=None,
        alias="firmwarePath",
        description="In-container path of firmware files KMM copies to the host.",
    )
    registry_tls: RegistryTLS | None = Field(
        default=None, alias="registryTLS", description="Registry TLS options."
    )
    sign: Sign | None = Field(
        default=None,
        description="In-cluster signing of the modules with the admin's key, for every "
        "mapping (KMM's moduleLoader.container.sign); a change is rolled out node by node.",
    )
    image_rebuild_trigger_generation: int | None = Field(
        default=None,
        alias="imageRebuildTriggerGeneration",
        ge=0,
        le=2**31 - 1,
        description="Raise it to have KMM check, build and sign every image again (KMM's "
        "Module spec.imageRebuildTriggerGeneration), e.g. after a failed in-cluster signing, "
        "which KMM does not retry by itself. Nothing is reloaded: not part of the version.",
    )


class Toleration(_Model):
    """A pod toleration copied to KMM's module loader and build pods."""

    key: str | None = Field(default=None, description="Taint key.")
    operator: Literal["Exists", "Equal"] | None = Field(default=None, description="Operator.")
    value: str | None = Field(default=None, description="Taint value.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect."
    )
    toleration_seconds: int | None = Field(
        default=None, alias="tolerationSeconds", description="For NoExecute taints."
    )


# Go-style durations as KMM and kubectl write them: "90s", "10m", "1h30m", "500ms".
GO_DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"
GoDuration = Annotated[str, Field(pattern=GO_DURATION_PATTERN, max_length=32)]
# maxUnavailable: a count of nodes, or "N%" of the targeted nodes.
MAX_UNAVAILABLE_SCHEMA = {
    "x-kubernetes-int-or-string": True,
    "description": "Nodes that may be unavailable at once: a number, or a percentage of the "
    'targeted nodes ("25%", rounded down, at least 1). Nodes already NotReady or cordoned count.',
}


class RolloutTimeouts(_Model):
    """How long each step of one node may take before the node is failed (or blocked)."""

    check: GoDuration = Field(default="60s", description="Fresh agent report and API checks.")
    drain: GoDuration = Field(
        default="10m",
        description="GPU pods, claims and paused GPU daemons gone; past it the node is "
        "Blocked. 0s: no limit, the node stays cordoned and waits.",
    )
    prepare: GoDuration = Field(default="2m", description="The agent's PrepareRequest answer.")
    load: GoDuration = Field(default="10m", description="KMM loads the new version.")
    verify: GoDuration = Field(default="5m", description="The agent confirms the new module.")


Weekday = Literal["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
# In date.weekday() order: Mon = 0.
WEEKDAYS: tuple[str, ...] = get_args(Weekday)


class MaintenanceWindow(_Model):
    """A recurring window in which the rollout may start nodes (a node in a step finishes)."""

    days: list[Weekday] = Field(
        min_length=1, max_length=7, description="Days of the week it opens on (Mon .. Sun)."
    )
    start: str = Field(
        pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$",
        description="Wall time it opens at, HH:MM in timeZone.",
    )
    duration: GoDuration = Field(
        description="How long it stays open (elapsed time, at most 168h), e.g. 4h."
    )
    time_zone: str = Field(
        default="UTC",
        alias="timeZone",
        min_length=1,
        max_length=64,
        description="IANA time zone of start, e.g. Europe/Berlin (default UTC).",
    )


class PrometheusGate(_Model):
    """A PromQL query that must return an empty result before the next node starts."""

    url: str = Field(
        pattern=r"^https?://[^\s]+$",
        max_length=512,
        description="Prometheus' base URL, e.g. http://prometheus.monitoring:9090; the "
        "coordinator calls <url>/api/v1/query.",
    )
    query: str = Field(
        min_length=1,
        max_length=4096,
        description="PromQL whose result must be empty, e.g. "
        'ALERTS{alertstate="firing",severity="critical"}.',
    )
    timeout: GoDuration = Field(default="10s", description="How long one query may take.")
    max_answer_age: GoDuration = Field(
        default="0s",
        alias="maxAnswerAge",
        description="How old an answer a node may start on. 0s (the default): a node starts "
        "only on an answer asked for that start; a held rollout is asked again every 2s.",
    )


class RolloutGates(_Model):
    """What must hold before the next node starts; a gate that cannot be evaluated holds."""

    prometheus: PrometheusGate | None = Field(default=None, description="A Prometheus query.")


# An extended resource name ("gpu.intel.com/xe") or a prefix of some ("gpu.intel.com/").
GpuResourceStr = Annotated[
    str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[-A-Za-z0-9_.]*$", max_length=253)
]
# A namespaced object's "namespace/name".
NAMESPACED_NAME_PATTERN = (
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
)


class RolloutPause(_Model):
    """The node's own GPU daemons (XPU Manager, exporters, the device plugin), paused while its
    driver changes: they select on gpuctl.dev/driver-ready=true, which the rollout takes off a
    node as it cordons it and puts back once the new driver is verified (docs/gpu-daemons.md)."""

    daemon_sets: list[Annotated[str, Field(pattern=NAMESPACED_NAME_PATTERN, max_length=317)]] = (
        Field(
            default_factory=list,
            alias="daemonSets",
            max_length=64,
            description='DaemonSets ("namespace/name") whose pods on a node are waited out '
            "after the pause rather than blocking it; they must select on "
            "gpuctl.dev/driver-ready=true.",
        )
    )
    pod_selector: dict[str, str] | None = Field(
        default=None,
        alias="podSelector",
        description="Pods with all these labels are paused like the daemonSets' pods.",
    )
    timeout: GoDuration = Field(
        default="5m",
        description="How long a verified node waits for its paused pods to be back and Ready "
        "before it is Done anyway, with a warning.",
    )


class RolloutDrain(_Model):
    """Other pods evicted with the GPU pods (evictGPUPods; PodDisruptionBudgets respected)."""

    pod_selector: dict[str, str] | None = Field(
        default=None,
        alias="podSelector",
        description="Pods with all these labels are evicted (or waited for) like GPU pods.",
    )


class Rollout(_Model):
    """How a `kernelModule.version` change rolls across nodes, one verified node at a time."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "!has(self.maxUnavailable) || (type(self.maxUnavailable) == int ? "
                "self.maxUnavailable >= 1 : string(self.maxUnavailable).matches("
                "'^[1-9][0-9]?%$|^100%$'))",
                "maxUnavailable must be a number >= 1 or a percentage from 1% to 100%",
            ),
        )
    )

    max_unavailable: Annotated[int | str, WithJsonSchema(MAX_UNAVAILABLE_SCHEMA)] = Field(
        default=1, alias="maxUnavailable"
    )
    paused: bool = Field(
        default=False,
        description="No new node starts (nodes mid-step finish their step); "
        "`gpuctl rollout pause|resume` flips it.",
    )
    hold_after_first_node: bool = Field(
        default=True,
        alias="holdAfterFirstNode",
        description="After the first node is done, wait until `gpuctl rollout resume` sets the "
        "annotation gpuctl.dev/rollout-resumed-version to the target version.",
    )
    cordon: bool = Field(default=True, description="Cordon each node while it is upgraded.")
    evict_gpu_pods: bool = Field(
        default=False,
        alias="evictGPUPods",
        description="Evict pods using gpu.intel.com resources (Eviction API, PDBs respected); "
        "otherwise wait for them to finish.",
    )
    trust_image_signatures: bool = Field(
        default=False,
        alias="trustImageSignatures",
        description="The images' modules are signed outside the cluster with a key the nodes "
        "trust: a node that enforces module signatures (Secure Boot) is not Blocked for a "
        "target without kernelModule.sign.",
    )
    unbind_idle_devices: bool = Field(
        default=False,
        alias="unbindIdleDevices",
        description="Let the agent unbind idle functions before the unload.",
    )
    disable_idle_vfs: bool = Field(
        default=False,
        alias="disableIdleVFs",
        description="Let the agent set sriov_numvfs to 0 where every VF is idle; restored "
        "after the load.",
    )
    verify_by: Literal["backportTag", "srcversion"] = Field(
        default="backportTag",
        alias="verifyBy",
        description="backportTag: the loaded module's backport tag is the target version; "
        "srcversion: the loaded module's srcversion changed.",
    )
    failure_budget: int = Field(
        default=1,
        ge=1,
        alias="failureBudget",
        description="Pause the rollout once this many nodes failed.",
    )
    on_node_failure: Literal["Pause", "Rollback"] = Field(
        default="Pause",
        alias="onNodeFailure",
        description="Pause: a node whose load or verification fails stays Failed and counts "
        "against failureBudget. Rollback: spec.kernelModule goes back to the previous revision "
        "in status.revisions, the failed node is taken there through the same checks, and the "
        "rollout pauses until `gpuctl rollout resume`.",
    )
    maintenance_windows: list[MaintenanceWindow] | None = Field(
        default=None,
        alias="maintenanceWindows",
        max_length=32,
        description="When set, new nodes start only inside one of these windows; a node in "
        "a step finishes it. Unset: any time.",
    )
    soak_seconds: int = Field(
        default=0,
        ge=0,
        le=86400,
        alias="soakSeconds",
        description="After the first node (with soakEachBatch, after each) is verified, watch "
        "it this long before the next node starts: a node that degrades (module not live, a "
        "function unbound, a new kernel taint flag) fails. 0: no soak.",
    )
    soak_each_batch: bool = Field(
        default=False,
        alias="soakEachBatch",
        description="Soak after every verified node, not only the first.",
    )
    gates: RolloutGates | None = Field(
        default=None,
        description="Checks that must pass before the next node starts (none: no gate).",
    )
    timeouts: RolloutTimeouts = Field(
        default_factory=RolloutTimeouts, description="Per-step timeouts (Go durations)."
    )
    pause: RolloutPause | None = Field(
        default=None,
        description="GPU daemons paused on a node while its driver changes (none: every "
        "process holding the GPU blocks the node).",
    )
    drain: RolloutDrain | None = Field(
        default=None, description="Other pods drained with the GPU pods."
    )
    gpu_resources: list[
        Annotated[
            str,
            Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/([-A-Za-z0-9_.]*)$", max_length=253),
        ]
    ] = Field(
        default_factory=lambda: list(DEFAULT_GPU_RESOURCES),
        alias="gpuResources",
        min_length=1,
        max_length=16,
        description="Extended resources that make a pod a GPU pod (drained before the "
        'unload): a prefix ending in "/" (default gpu.intel.com/) or a whole resource '
        "name, e.g. devices.kubevirt.io/ or intel.com/sriov_gpu.",
    )


class GPUDriverSpec(_Model):
    """What the admin writes."""

    pull_secret: LocalObjectReference | None = Field(
        default=None,
        alias="pullSecret",
        description="Registry secret in the coordinator's namespace (the Module's "
        "imageRepoSecret); with builds it needs push access.",
    )
    node_selector: dict[str, str] | None = Field(
        default=None,
        alias="nodeSelector",
        description="Labels of the GPU nodes; kubernetes.io/arch=amd64 is always added.",
    )
    use_nfd_labeling: bool | None = Field(
        default=None,
        alias="useNFDLabeling",
        description="Also target nodes NFD labeled intel.feature.node.kubernetes.io/gpu-pci=true.",
    )
    tolerations: list[Toleration] | None = Field(
        default=None,
        description="Tolerations of KMM's module loader and build pods.",
    )
    tolerate_all_taints: bool = Field(
        default=True,
        alias="tolerateAllTaints",
        description="Every taint is tolerated: no taint (NotReady, unreachable, cordon, "
        "autoscaler, reboot daemons) takes the driver off a node. false: the driver goes only "
        "to nodes whose NoSchedule/NoExecute taints `tolerations` (or the cordon's) tolerate; a "
        "node that gets another such taint, or whose tolerations are narrowed, is unloaded "
        "node by node through the checks (held while busy). The Module itself always tolerates "
        "every taint, so KMM never unloads a node for one.",
    )
    kernel_module: KernelModule | None = Field(
        default=None,
        alias="kernelModule",
        description="The out-of-tree driver; removing it unloads the driver node by node.",
    )
    rollout: Rollout | None = Field(default=None, description="Rollout options.")


def parse_spec(spec: dict[str, Any]) -> GPUDriverSpec:
    """Parse a GPUDriver's spec as the API server stored it: fields this gpuctl does not know
    (a newer CRD's) are left out, not refused (unknown_fields.py)."""
    return GPUDriverSpec.model_validate(known_only(GPUDriverSpec, spec))
