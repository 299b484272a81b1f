"""GPU pods: a GPU resource requested or limited by any container (or, where DRA is not
served, a ResourceClaim referenced), and not finished."""

from __future__ import annotations

from typing import Any

from gpuctl.common.gpu_pods import is_gpu_pod, requests_gpu


def _pod(resources: dict[str, Any], phase: str = "Running", init: bool = False) -> dict[str, Any]:
    containers = [{"name": "c", "resources": resources}]
    key = "initContainers" if init else "containers"
    return {"spec": {key: containers}, "status": {"phase": phase}}


def test_gpu_pods_are_recognised_by_their_resources() -> None:
    assert requests_gpu(_pod({"limits": {"gpu.intel.com/xe": "1"}}))
    assert requests_gpu(_pod({"requests": {"gpu.intel.com/i915": "1"}}))
    assert requests_gpu(_pod({"limits": {"gpu.intel.com/xe": "1"}}, init=True))
    assert not requests_gpu(_pod({"limits": {"nvidia.com/gpu": "1", "cpu": "2"}}))
    assert not requests_gpu({"spec": {}})


def test_a_finished_pod_is_no_gpu_pod() -> None:
    gpu = {"limits": {"gpu.intel.com/xe": "1"}}
    assert is_gpu_pod(_pod(gpu, "Pending"))
    assert is_gpu_pod(_pod(gpu, "Running"))
    assert not is_gpu_pod(_pod(gpu, "Succeeded"))
    assert not is_gpu_pod(_pod(gpu, "Failed"))


def test_a_pod_referencing_claims_counts_only_where_dra_is_not_served() -> None:
    """Served, its claims are read (gpu_claims.py); not served, nobody can read them."""
    pod = _pod({"limits": {"cpu": "1"}})
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "train-0"}]
    assert not is_gpu_pod(pod)
    assert not is_gpu_pod(pod, dra_served=True)
    assert is_gpu_pod(pod, dra_served=False)
    pod["status"]["phase"] = "Succeeded"
    assert not is_gpu_pod(pod, dra_served=False)
    assert not is_gpu_pod(_pod({"limits": {"cpu": "1"}}), dra_served=False)
