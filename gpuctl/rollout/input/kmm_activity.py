"""What KMM is doing on a node, in words, from its own objects (pure).

When KMM does not load (or unload) what the rollout asked for in time, "KMM did not load"
is not enough for an admin: the reason a node Fails names what KMM did. Two of KMM's objects
say it:

- its worker Pod on the node (`kmm-worker-<node>-<module>`, labelled with the Module's name
  and the action): an init container that cannot pull the image, a worker container that
  exits and crash-loops (a refused load, `Module xe is in use`), or a Pod still running;
- its ModuleImagesConfig (one per Module: each image's state, as its pull Pods found it):
  until the node's image `Exists` there, KMM writes no config for the node and starts no
  loader there (module_reconciler.go: "Image does not exist, not adding to NMC"). A pull that
  fails leaves the image without a state (mic_reconciler.go) and is tried again;
  `DoesNotExist` is written only with `skipWaitMissingImage`. (KMM's version change unloads
  the old module before it looks for the new image: such a node has lost its driver.)

`worker_pod_part` is what the coordinator's Pod watch keeps of a worker Pod (the rest of a Pod
it drops, pods.watched_part); `kmm_activity` turns that and the image's state into a sentence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuctl.common import names

WORKER_ACTION_LABEL = names.KMM_WORKER_ACTION_LABEL
MODULE_NAME_LABEL = "kmm.node.kubernetes.io/module.name"
IMAGE_DOES_NOT_EXIST = "DoesNotExist"
IMAGE_EXISTS = "Exists"
STATUS_LISTS = ("initContainerStatuses", "containerStatuses")
STATE_FIELDS = ("reason", "message", "exitCode")
KEPT_LABELS = (WORKER_ACTION_LABEL, MODULE_NAME_LABEL)


def is_worker_pod(pod: Mapping[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return WORKER_ACTION_LABEL in labels and MODULE_NAME_LABEL in labels


def _container_part(container: Mapping[str, Any]) -> dict[str, Any]:
    part: dict[str, Any] = {
        "name": container.get("name", ""),
        "restartCount": container.get("restartCount", 0),
    }
    for key in ("state", "lastState"):
        state = container.get(key) or {}
        kept = {}
        for kind, detail in state.items():
            if isinstance(detail, Mapping):
                kept[kind] = {f: detail[f] for f in STATE_FIELDS if f in detail}
        if kept:
            part[key] = kept
    return part


def worker_pod_part(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What `kmm_activity` reads of a worker Pod, beside its name and namespace: its two KMM
    labels and its containers' states (restarts, waiting reason and message, exit codes)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    status = pod.get("status") or {}
    kept_status: dict[str, Any] = {"phase": status.get("phase", "")}
    for key in STATUS_LISTS:
        if status.get(key):
            kept_status[key] = [_container_part(c) for c in status[key]]
    return {
        "metadata": {"labels": {k: labels[k] for k in KEPT_LABELS if k in labels}},
        "status": kept_status,
    }


def module_worker_pods(
    pods: Iterable[Mapping[str, Any]], namespace: str, module: str
) -> list[Mapping[str, Any]]:
    """KMM's worker Pods of Module `namespace/module` among a node's Pods."""
    return [
        pod
        for pod in pods
        if is_worker_pod(pod)
        and (pod.get("metadata") or {}).get("namespace") == namespace
        and ((pod.get("metadata") or {}).get("labels") or {}).get(MODULE_NAME_LABEL) == module
    ]


def image_state(images_config: Mapping[str, Any] | None, image: str) -> str:
    """The state KMM's ModuleImagesConfig gives `image` ("" when it has none yet)."""
    for entry in ((images_config or {}).get("status") or {}).get("imagesStates") or []:
        if entry.get("image") == image:
            return str(entry.get("status") or "")
    return ""


def _exit_words(container: Mapping[str, Any]) -> str:
    last = (container.get("lastState") or {}).get("terminated") or {}
    now = (container.get("state") or {}).get("terminated") or {}
    ended = now or last
    if "exitCode" not in ended:
        return ""
    restarts = int(container.get("restartCount") or 0)
    again = f", restarted {restarts} time{'s' if restarts != 1 else ''}" if restarts else ""
    return f"exited with code {ended['exitCode']}{again}"


def _container_words(container: Mapping[str, Any]) -> str:
    """One container's trouble, or "" when it is running or ended well."""
    name = container.get("name", "")
    state = container.get("state") or {}
    waiting = state.get("waiting") or {}
    exited = _exit_words(container)
    if waiting:
        reason = str(waiting.get("reason") or "waiting")
        message = str(waiting.get("message") or "")
        detail = "; ".join(w for w in (message, exited) if w)
        return f"container {name} {reason}" + (f" ({detail})" if detail else "")
    terminated = state.get("terminated") or {}
    if terminated and terminated.get("exitCode", 0) != 0:
        return f"container {name} {exited}"
    if "running" in state and exited and int(container.get("restartCount") or 0):
        return f"container {name} running again after it {exited}"
    return ""


def _worker_words(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = pod.get("status") or {}
    action = str(labels.get(WORKER_ACTION_LABEL, "")).lower() or "worker"
    troubles = [
        words
        for key in STATUS_LISTS
        for container in status.get(key) or []
        if (words := _container_words(container))
    ]
    what = "; ".join(troubles) or f"{str(status.get('phase') or 'Pending').lower()}"
    return f"KMM's {action} Pod {meta.get('namespace', '')}/{meta.get('name', '')}: {what}"


def kmm_activity(
    worker_pods: Iterable[Mapping[str, Any]], *, image: str, state_of_image: str
) -> str:
    """What KMM shows for one node and Module: its worker Pods there (`module_worker_pods`)
    and the state of the image the node's kernel maps to. "" when KMM's objects say nothing
    worth telling (no worker Pod, the image there)."""
    pods = sorted(worker_pods, key=lambda p: str((p.get("metadata") or {}).get("name", "")))
    if pods:
        return "; ".join(_worker_words(pod) for pod in pods)
    if not image or state_of_image == IMAGE_EXISTS:
        return ""
    if state_of_image == IMAGE_DOES_NOT_EXIST:
        return (
            f"KMM found no image {image} for the node's kernel (its ModuleImagesConfig says "
            f"{IMAGE_DOES_NOT_EXIST}), so it has started no loader there"
        )
    if state_of_image:  # NeedsBuilding, NeedsSigning
        return f"KMM's ModuleImagesConfig says image {image} {state_of_image}"
    return (
        f"KMM has not pulled image {image}: its ModuleImagesConfig has no state for it (KMM "
        "retries a pull that fails; its pull Pods say why), so it has started no loader there"
    )
