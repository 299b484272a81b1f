"""gpuctl/cli/bundle.py: a Pod deleted between the list and its log's read is said in its log
file, not taken for a failure; any other refusal is in errors.txt; a restarted container's
previous log is read too."""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from gpuctl.cli.bundle import GONE, Bundle, add_logs


class Core:
    """The one call add_logs makes, answering per (container, previous)."""

    def __init__(self, answers: dict[tuple[str, bool], str | int]) -> None:
        self.answers = answers

    def read_namespaced_pod_log(
        self, name: str, namespace: str, *, container: str, previous: bool, **_: Any
    ) -> str:
        answer = self.answers[(container, previous)]
        if isinstance(answer, int):
            raise ApiException(status=answer, reason="Not Found" if answer == 404 else "Forbidden")
        return answer


def pod(restarts: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "kmm-worker-gpu-3", "namespace": "gpuctl-system"},
        "spec": {"containers": [{"name": "worker"}]},
        "status": {"containerStatuses": [{"name": "worker", "restartCount": restarts}]},
    }


def test_a_pod_gone_before_its_log_is_read_is_said_in_the_log_file() -> None:
    bundle = Bundle()
    add_logs(
        bundle, Core({("worker", False): 404}), pod(0), folder="logs/kmm/", lines=10, timeout=1
    )
    assert bundle.files == {"logs/kmm/kmm-worker-gpu-3_worker.log": GONE.encode()}
    assert bundle.errors == []


def test_a_refused_log_is_an_error_and_a_restart_reads_the_previous_one() -> None:
    bundle = Bundle()
    core = Core({("worker", False): "loaded\n", ("worker", True): 403})
    add_logs(bundle, core, pod(1), folder="logs/kmm/", lines=10, timeout=1)
    assert bundle.files == {"logs/kmm/kmm-worker-gpu-3_worker.log": b"loaded\n"}
    [error] = bundle.errors
    assert error.startswith("previous log of gpuctl-system/kmm-worker-gpu-3 container worker: ")
