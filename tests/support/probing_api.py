"""The in-memory API server with a kubelet for gpuctl's image probes
(gpuctl/rollout/input/image_probe.py): a probe Pod POSTed there ends at once, as a kubelet running
KMM's copy in it would end it.

`lacking` names the images that hold no modules for any kernel (their probe's copy exits 1,
with cp's words as the termination message); every other image holds them (Succeeded).
"""

from __future__ import annotations

from typing import Any

from gpuctl.rollout.input.image_probe import PROBE_CONTAINER, is_probe_pod, modules_folder
from tests.support.memory_api import MemoryApi

ENDED_AT = "2026-11-29T12:00:00Z"


def probe_ended(pod: dict[str, Any], exit_code: int, message: str = "") -> dict[str, Any]:
    """The status a kubelet writes on a probe Pod whose container exited with `exit_code`."""
    image = pod["spec"]["containers"][0]["image"]
    terminated: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "startedAt": ENDED_AT,
        "finishedAt": ENDED_AT,
    }
    if message:
        terminated["message"] = message
    return {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "containerStatuses": [
            {"name": PROBE_CONTAINER, "image": image, "state": {"terminated": terminated}}
        ],
    }


class ProbingApi(MemoryApi):
    def __init__(self) -> None:
        super().__init__()
        self.lacking: set[str] = set()
        self.probes: list[dict[str, Any]] = []

    def request(
        self,
        method: str,
        resource_path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "",
        timeout: float | None = None,
    ) -> dict[str, Any]:
        answer = super().request(
            method, resource_path, query=query, body=body, content_type=content_type
        )
        if method == "POST" and isinstance(body, dict) and is_probe_pod(body):
            self.probes.append(body)
            kernel = body["metadata"]["annotations"]["gpuctl.dev/probe-kernel"]
            lacks = body["spec"]["containers"][0]["image"] in self.lacking
            words = f"cp: can't stat '{modules_folder(kernel)}': No such file or directory"
            status = probe_ended(body, 1, words) if lacks else probe_ended(body, 0)
            name = f"{resource_path}/{body['metadata']['name']}"
            answer = super().request("PATCH", f"{name}/status", body={"status": status})
        return answer
