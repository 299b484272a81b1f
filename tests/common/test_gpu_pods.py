"""GPU pods: a GPU resource requested or limited by any container (or, where DRA is not
served, a ResourceClaim referenced), and not finished (gpuctl/common/gpu_pods.py); the rollout's
pod watch keeps what that rule reads."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.common.gpu_pods import is_gpu_pod, requests_gpu
from gpuctl.rollout.input.gpu_pod_watch import watched_part
from gpuctl.rollout.input.pod_facts import pod_facts
from gpuctl.rollout.input.settings import SettingsError, rollout_settings


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


def test_a_gpudriver_names_its_own_gpu_resources_by_prefix_or_whole_name() -> None:
    """rollout.gpuResources: KubeVirt's and SR-IOV device plugins name theirs differently."""
    resources = ("devices.kubevirt.io/", "intel.com/sriov_gpu")
    vm = _pod({"limits": {"devices.kubevirt.io/xe-vf": "1"}})
    sriov = _pod({"requests": {"intel.com/sriov_gpu": "1"}})
    near_miss = _pod({"requests": {"intel.com/sriov_gpu_other": "1"}})
    assert not is_gpu_pod(vm)  # not by default
    assert is_gpu_pod(vm, resources=resources)
    assert is_gpu_pod(sriov, resources=resources)
    assert not is_gpu_pod(near_miss, resources=resources)  # a whole name is not a prefix
    assert not is_gpu_pod(_pod({"limits": {"gpu.intel.com/xe": "1"}}), resources=resources)
    settings = rollout_settings({"rollout": {"gpuResources": list(resources)}})
    assert settings.gpu_resources == resources
    assert rollout_settings({}).gpu_resources == ("gpu.intel.com/",)
    with pytest.raises(SettingsError, match="gpuResources"):
        rollout_settings({"rollout": {"gpuResources": ["no slash"]}})


def test_the_pod_watch_keeps_every_extended_resource_and_the_rule_answers_the_same() -> None:
    pod = {
        **_pod({"limits": {"devices.kubevirt.io/xe-vf": "1", "cpu": "1", "gpu.intel.com/xe": "1"}}),
        "metadata": {"name": "vm", "namespace": "vms", "uid": "u"},
    }
    kept = watched_part(pod)
    assert kept["spec"]["containers"] == [
        {"resources": {"limits": {"devices.kubevirt.io/xe-vf": "1", "gpu.intel.com/xe": "1"}}}
    ]
    facts = pod_facts(kept)
    for resources in (("devices.kubevirt.io/",), ("gpu.intel.com/",), ("nvidia.com/",)):
        assert facts.uses_gpu(resources) == is_gpu_pod(pod, resources=resources)
