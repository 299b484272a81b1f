"""What KMM is doing on a node, told from its worker Pods and ModuleImagesConfig (plain data).

The Pods are shaped as a kubelet writes them (testbed/harness/kubelet/pod_status.py writes the
same shapes for KMM's real Pods in the integration tests).
"""

from __future__ import annotations

from typing import Any

from gpuctl.common.gpu_pods import is_gpu_pod
from gpuctl.rollout.input.gpu_pod_watch import watched_part
from gpuctl.rollout.input.kmm_activity import (
    MODULE_NAME_LABEL,
    WORKER_ACTION_LABEL,
    image_state,
    kmm_activity,
    module_worker_pods,
    worker_pod_part,
)

NAMESPACE = "gpuctl-system"
IMAGE = "registry.example.com/xe:v7.1.4.6"


def worker(
    action: str = "Load",
    *,
    module: str = "gpu-gpu",
    namespace: str = NAMESPACE,
    init: dict[str, Any] | None = None,
    main: dict[str, Any] | None = None,
    phase: str = "Pending",
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if init is not None:
        status["initContainerStatuses"] = [{"name": "image-extractor", **init}]
    if main is not None:
        status["containerStatuses"] = [{"name": "worker", **main}]
    return {
        "metadata": {
            "name": f"kmm-worker-n1-{module}",
            "namespace": namespace,
            "resourceVersion": "9",
            "labels": {
                WORKER_ACTION_LABEL: action,
                MODULE_NAME_LABEL: module,
                "app.kubernetes.io/component": "worker",
            },
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "worker", "image": "kmm-worker"}]},
        "status": status,
    }


PULL_BACK_OFF = {
    "restartCount": 0,
    "state": {
        "waiting": {"reason": "ImagePullBackOff", "message": f'failed to pull image "{IMAGE}"'}
    },
}
CRASH_LOOP = {
    "restartCount": 3,
    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
    "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
}
COPIED = {"restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}


def told(pod: dict[str, Any], state: str = "Exists") -> str:
    """What the coordinator would say, from what its Pod watch keeps of `pod`."""
    kept = watched_part(pod)
    return kmm_activity(
        module_worker_pods([kept], NAMESPACE, "gpu-gpu"), image=IMAGE, state_of_image=state
    )


def test_an_image_the_kubelet_cannot_pull_is_named() -> None:
    assert told(worker(init=PULL_BACK_OFF)) == (
        f"KMM's load Pod {NAMESPACE}/kmm-worker-n1-gpu-gpu: container image-extractor "
        f'ImagePullBackOff (failed to pull image "{IMAGE}")'
    )


def test_a_crash_looping_worker_says_how_it_ended_and_how_often() -> None:
    assert told(worker("Unload", init=COPIED, main=CRASH_LOOP, phase="Running")) == (
        f"KMM's unload Pod {NAMESPACE}/kmm-worker-n1-gpu-gpu: container worker "
        "CrashLoopBackOff (exited with code 1, restarted 3 times)"
    )


def test_a_worker_still_running_is_said_to_run() -> None:
    running = {"restartCount": 0, "state": {"running": {"startedAt": "2026-12-01T00:00:00Z"}}}
    assert told(worker(init=COPIED, main=running, phase="Running")) == (
        f"KMM's load Pod {NAMESPACE}/kmm-worker-n1-gpu-gpu: running"
    )


def test_a_worker_running_again_after_failing_says_how_it_ended() -> None:
    again = {**CRASH_LOOP, "state": {"running": {"startedAt": "2026-12-01T00:00:00Z"}}}
    assert told(worker(init=COPIED, main=again, phase="Running")) == (
        f"KMM's load Pod {NAMESPACE}/kmm-worker-n1-gpu-gpu: container worker running again "
        "after it exited with code 1, restarted 3 times"
    )


def test_a_failed_container_without_restarts_gives_its_exit_code() -> None:
    failed = {"restartCount": 0, "state": {"terminated": {"exitCode": 137}}}
    assert told(worker(init=COPIED, main=failed, phase="Failed")) == (
        f"KMM's load Pod {NAMESPACE}/kmm-worker-n1-gpu-gpu: container worker exited with code 137"
    )


def test_no_worker_and_a_missing_image_says_no_loader_started() -> None:
    assert kmm_activity([], image=IMAGE, state_of_image="DoesNotExist") == (
        f"KMM found no image {IMAGE} for the node's kernel (its ModuleImagesConfig says "
        "DoesNotExist), so it has started no loader there"
    )


def test_no_worker_and_an_image_not_pulled_says_no_loader_started() -> None:
    words = kmm_activity([], image=IMAGE, state_of_image="")
    assert words.startswith(f"KMM has not pulled image {IMAGE}: its ModuleImagesConfig has no ")
    assert words.endswith("so it has started no loader there")


def test_an_image_being_built_is_said_to_be() -> None:
    assert kmm_activity([], image=IMAGE, state_of_image="NeedsBuilding") == (
        f"KMM's ModuleImagesConfig says image {IMAGE} NeedsBuilding"
    )


def test_nothing_to_tell_is_empty() -> None:
    assert kmm_activity([], image=IMAGE, state_of_image="Exists") == ""
    assert kmm_activity([], image="", state_of_image="") == ""


def test_only_this_modules_workers_count() -> None:
    pods = [
        worker(module="other-gpu"),
        worker(namespace="elsewhere"),
        {"metadata": {"name": "train-0", "namespace": NAMESPACE}},
        worker(),
    ]
    found = module_worker_pods(pods, NAMESPACE, "gpu-gpu")
    assert [
        (p["metadata"]["namespace"], p["metadata"]["labels"][MODULE_NAME_LABEL]) for p in found
    ] == [(NAMESPACE, "gpu-gpu")]


def test_the_image_state_is_read_from_the_images_config() -> None:
    config = {
        "status": {
            "imagesStates": [
                {"image": "registry.example.com/xe:old", "status": "Exists"},
                {"image": IMAGE, "status": "DoesNotExist"},
            ]
        }
    }
    assert image_state(config, IMAGE) == "DoesNotExist"
    assert image_state(config, "registry.example.com/xe:new") == ""
    assert image_state(None, IMAGE) == ""
    assert image_state({"status": None}, IMAGE) == ""


def test_the_pod_watch_keeps_a_workers_state_and_still_sees_no_gpu_pod() -> None:
    pod = worker(init=COPIED, main=CRASH_LOOP, phase="Running")
    kept = watched_part(pod)
    assert kept["metadata"]["labels"] == {WORKER_ACTION_LABEL: "Load", MODULE_NAME_LABEL: "gpu-gpu"}
    assert kept["status"] == worker_pod_part(pod)["status"]
    assert kept["status"]["containerStatuses"][0]["lastState"] == {
        "terminated": {"exitCode": 1, "reason": "Error"}
    }
    assert is_gpu_pod(kept) is is_gpu_pod(pod) is False


def test_other_pods_keep_their_labels_but_no_container_states() -> None:
    """A pod's labels are what the pause selects on (rollout.pause.podSelector); its
    containers' states concern nobody but KMM's worker."""
    pod = worker()
    del pod["metadata"]["labels"][WORKER_ACTION_LABEL]
    kept = watched_part(pod)
    assert kept["metadata"]["labels"] == pod["metadata"]["labels"]
    assert kept["status"] == {"phase": "Pending", "conditions": []}
