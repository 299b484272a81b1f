"""Proof that a reload's image holds the node's kernel's modules, before the flip (pure).

KMM's `Exists` is not "carries this kernel's module". Its pull Pod runs the image with
`/bin/sh -c 'exit 0'` (internal/pod/imagepuller.go, CreatePullPod): any image that pulls
`Exists` in its ModuleImagesConfig (mic_reconciler.go). Its PreflightValidation asks the same
record and no more (preflightvalidation_reconciler.go, updateStatus: `Exists` is
"verified image exists"). The loader is the first to look inside: its init container
(internal/pod/workerpodmanager.go, baseWorkerPod and addCopyCommand) runs, with an emptyDir
at /tmp,

    /bin/sh -c 'mkdir -p /tmp/opt/lib/modules;
                cp -R /opt/lib/modules/<kernel> /tmp/opt/lib/modules;'

(`/opt` is modprobe.dirName, which gpuctl writes; `<kernel>` the node's nodeInfo.kernelVersion
less a trailing '+', module_reconciler.go), and under `restartPolicy: OnFailure` it fails for
ever when the folder is missing, after the version flip has unloaded the old module. A mapping
`^.+$` to a fixed tag built for another kernel passes KMM's record and strands every node.

So before a reload's flip the coordinator runs that same command, in the same image, on the
node itself: a probe Pod (`probe_pod`: `nodeName` the node, every taint tolerated,
`restartPolicy: Never`, the Module's pull secret, pulled `Always` so a fixed image pushed
under the same tag is what it runs, and what the loader later finds in the node's cache). Its
end is a fact of the node (`read_probe`): Succeeded proves the folder is there; a container
that exited otherwise proves the loader's copy fails (`image-lacks-kernel`); a pull that fails
on the node, a Pod still running, or a watch that cannot be trusted prove nothing. One Pod per
GPUDriver, node, image and kernel (`probe_name`), kept until the node's KMM write (then
deleted) or until it is run again (a Blocked node's recheck).
"""

from __future__ import annotations

import enum
import hashlib
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.gpudriver.module_spec import KMM_DEFAULT_DIR_NAME

# On every probe Pod: the GPUDriver it is for (the label), the image and kernel it proves.
PROBE_LABEL = "gpuctl.dev/image-probe"
PROBE_IMAGE_ANNOTATION = "gpuctl.dev/probe-image"
PROBE_KERNEL_ANNOTATION = "gpuctl.dev/probe-kernel"
PROBE_CONTAINER = "probe"
# KMM's shared folder between the init container and the worker (workerpodmanager.go).
SHARED_FILES_DIR = "/tmp"  # noqa: S108 - a path in KMM's Pod, no file of ours
PULL_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})


def modules_folder(kernel: str) -> str:
    """Where KMM's loader copies a kernel's modules from in the image."""
    return f"{KMM_DEFAULT_DIR_NAME}/lib/modules/{kernel}"


def copy_command(kernel: str) -> str:
    """KMM's init-container script for `kernel` (addCopyCommand), word for word."""
    into = f"{SHARED_FILES_DIR}{KMM_DEFAULT_DIR_NAME}/lib/modules"
    return f"\nmkdir -p {into};\ncp -R {shlex.quote(modules_folder(kernel))} {into};\n"


def probe_name(driver: str, node: str, image: str, kernel: str) -> str:
    """The probe Pod of one GPUDriver, node, image and kernel (a valid Pod name)."""
    digest = hashlib.sha256("\0".join((driver, node, image, kernel)).encode()).hexdigest()
    return f"gpuctl-image-probe-{digest[:20]}"


def probe_pod(
    *, driver: str, namespace: str, node: str, image: str, kernel: str, pull_secret: str = ""
) -> dict[str, Any]:
    """The probe Pod: KMM's copy of `kernel`'s modules out of `image`, on `node`."""
    spec: dict[str, Any] = {
        "nodeName": node,
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "tolerations": [{"operator": "Exists"}],
        "containers": [
            {
                "name": PROBE_CONTAINER,
                "image": image,
                "imagePullPolicy": "Always",
                "command": ["/bin/sh", "-c"],
                "args": [copy_command(kernel)],
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "volumeMounts": [{"name": "tmp", "mountPath": SHARED_FILES_DIR}],
            }
        ],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
    }
    if pull_secret:
        spec["imagePullSecrets"] = [{"name": pull_secret}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": probe_name(driver, node, image, kernel),
            "namespace": namespace,
            "labels": {PROBE_LABEL: driver},
            "annotations": {PROBE_IMAGE_ANNOTATION: image, PROBE_KERNEL_ANNOTATION: kernel},
        },
        "spec": spec,
    }


class ProbeOutcome(enum.StrEnum):
    # Not ended: pulling, running, or waiting for its node.
    RUNNING = "Running"
    # Succeeded: the image holds the kernel's folder.
    HOLDS = "Holds"
    # Its container exited otherwise: the loader's copy would fail the same way.
    LACKS = "Lacks"
    # The node cannot pull the image (the loader could not either).
    CANNOT_PULL = "CannotPull"
    # Ended without an answer (Failed with no exit of its container: evicted, node lost).
    UNDECIDED = "Undecided"


@dataclass(frozen=True)
class ImageProbe:
    """One probe Pod as read."""

    name: str
    image: str
    kernel: str
    outcome: ProbeOutcome
    # What it says: the exit code and message, or the kubelet's waiting reason.
    words: str = ""
    # When its container ended (RFC 3339; "" while not ended).
    finished_at: str = ""
    deleting: bool = False


def is_probe_pod(pod: Mapping[str, Any]) -> bool:
    return PROBE_LABEL in ((pod.get("metadata") or {}).get("labels") or {})


_STATE_FIELDS = ("reason", "message", "exitCode", "finishedAt")


def probe_part(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What the coordinator's Pod watch keeps of a probe Pod: its label and annotations and
    its container's state (besides what pods.watched_part keeps of every Pod)."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    status = pod.get("status") or {}
    containers = []
    for container in status.get("containerStatuses") or []:
        state = {
            kind: {f: detail[f] for f in _STATE_FIELDS if f in detail}
            for kind, detail in (container.get("state") or {}).items()
            if isinstance(detail, Mapping)
        }
        containers.append({"name": container.get("name", ""), "state": state})
    kept_status: dict[str, Any] = {"phase": status.get("phase", "")}
    if containers:
        kept_status["containerStatuses"] = containers
    if status.get("reason"):
        kept_status["reason"] = status["reason"]
    return {
        "metadata": {
            "labels": {PROBE_LABEL: ((meta.get("labels") or {}).get(PROBE_LABEL, ""))},
            "annotations": {
                k: annotations[k]
                for k in (PROBE_IMAGE_ANNOTATION, PROBE_KERNEL_ANNOTATION)
                if k in annotations
            },
        },
        "status": kept_status,
    }


def _container_state(status: Mapping[str, Any]) -> Mapping[str, Any]:
    for container in status.get("containerStatuses") or []:
        if container.get("name") == PROBE_CONTAINER:
            return dict(container.get("state") or {})
    return {}


def read_probe(pod: Mapping[str, Any]) -> ImageProbe:
    """A probe Pod's outcome, from its phase and its container's state."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    status = pod.get("status") or {}
    phase = status.get("phase", "")
    state = _container_state(status)
    ended = state.get("terminated") or {}
    waiting = state.get("waiting") or {}
    outcome, words = ProbeOutcome.RUNNING, ""
    if phase == "Succeeded":
        outcome = ProbeOutcome.HOLDS
    elif ended and int(ended.get("exitCode") or 0) != 0:
        outcome = ProbeOutcome.LACKS
        message = str(ended.get("message") or "").strip()
        words = f"exit code {ended['exitCode']}" + (f": {message}" if message else "")
    elif phase == "Failed":
        outcome = ProbeOutcome.UNDECIDED
        words = str(status.get("reason") or "Failed")
    elif waiting.get("reason") in PULL_FAILURES:
        outcome = ProbeOutcome.CANNOT_PULL
        message = str(waiting.get("message") or "")
        words = f"{waiting['reason']}" + (f": {message}" if message else "")
    return ImageProbe(
        name=str(meta.get("name", "")),
        image=str(annotations.get(PROBE_IMAGE_ANNOTATION, "")),
        kernel=str(annotations.get(PROBE_KERNEL_ANNOTATION, "")),
        outcome=outcome,
        words=words,
        finished_at=str(ended.get("finishedAt") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def node_probes(pods: Iterable[Mapping[str, Any]], driver: str) -> tuple[ImageProbe, ...]:
    """The probe Pods of GPUDriver `driver` among a node's Pods, by name."""
    found = [
        read_probe(pod)
        for pod in pods
        if ((pod.get("metadata") or {}).get("labels") or {}).get(PROBE_LABEL) == driver
    ]
    return tuple(sorted(found, key=lambda p: p.name))
