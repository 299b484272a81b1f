"""`gpuctl preflight --kernel K` and `gpuctl nodes --kernel-check` on KMM's own operator:
before nodes boot a new kernel, is there an image for it? KMM's PreflightValidation pulls the
image the mapping names for K (the stand-in kubelet runs KMM's pull Pod against the test's
image catalogue): missing, the command says so in the kubelet's words and exits 1; pushed, it
exits 0. `--kernel-check` finds K itself: the agent reports the newest installed kernel. The
real `gpuctl` binary, the real API server, real KMM; the PreflightValidation is gone after.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from gpuctl.common import names
from testbed.fakehost import FakeHost
from testbed.rollout_live.images import IMAGE_REPOSITORY, OLD, image_of
from testbed.rollout_live.rig import BIN, RolloutRig
from testbed.rollout_live.scenario import FAST, old_root, start

pytestmark = pytest.mark.integration

NEXT_KERNEL = "6.8.0-61-generic"


def gpuctl(rig: RolloutRig, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "gpuctl"), *args, "--kubeconfig", str(rig.cluster.kubeconfig)],
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
    )


def preflight(rig: RolloutRig, *args: str) -> subprocess.CompletedProcess[str]:
    return gpuctl(rig, "preflight", *args)


def per_kernel_images(rig: RolloutRig, running: str) -> None:
    """The GPUDriver's mappings: one for the running kernel, one for every other, each image
    tagged with the node's kernel by KMM's template (the next kernel's nobody has pushed
    yet)."""
    rig.patch_driver(
        {
            "spec": {
                "kernelModule": {
                    "kernelMappings": [
                        {
                            "regexp": f"^{running.replace('.', '[.]')}$",
                            "containerImage": image_of(OLD),
                        },
                        {
                            "regexp": "^.+$",
                            "containerImage": f"{IMAGE_REPOSITORY}:{OLD}-$KERNEL_FULL_VERSION",
                        },
                    ]
                }
            }
        }
    )


def preflight_validations(rig: RolloutRig) -> list[Any]:
    listed = rig.kube.request(
        "GET",
        f"/apis/{names.KMM_GROUP}/{names.KMM_PREFLIGHT_VERSION}/{names.KMM_PREFLIGHT_PLURAL}",
    )
    return [i for i in listed.get("items") or [] if not i["metadata"].get("deletionTimestamp")]


def test_preflight_finds_a_missing_image_for_the_next_kernel_then_the_pushed_one(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    [node] = start(rig, ["a"], FAST)
    per_kernel_images(rig, rig.hosts[node].kernel_release)
    rig.wait_phases({node: "Done"}, timeout=120)  # the new configuration, on the same image
    missing = preflight(rig, "--kernel", NEXT_KERNEL, "-o", "json", "--timeout", "120")
    assert missing.returncode == 1, missing.stderr + missing.stdout
    [verdict] = json.loads(missing.stdout)
    assert verdict["outcome"] == "fail"
    assert verdict["image"] == f"{IMAGE_REPOSITORY}:{OLD}-{NEXT_KERNEL}"
    assert verdict["imageExists"] is False
    assert verdict["imageCheck"].startswith(("ErrImagePull", "ImagePullBackOff")), verdict
    assert verdict["signing"].startswith("unsigned")
    rig.publish(OLD, NEXT_KERNEL)
    found = preflight(rig, "--kernel", NEXT_KERNEL, "--timeout", "120")
    assert found.returncode == 0, found.stderr + found.stdout
    assert f"kernel {NEXT_KERNEL}: PASS" in found.stdout
    assert "found:   KMM: verified image exists" in found.stdout
    assert preflight_validations(rig) == []  # each run removed its own


def next_kernel_root(path: Any) -> FakeHost:
    """old_root with a newer kernel installed: what the node boots next."""
    host = old_root(path)
    host.install_kernel(NEXT_KERNEL)
    return host


def test_kernel_check_lists_the_node_whose_next_kernel_has_no_image_until_it_is_pushed(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    upgraded = rig.add_node("a", next_kernel_root)
    same = rig.add_node("b", old_root)
    rig.create_driver(OLD, FAST)
    rig.start_coordinator()
    for node in (upgraded, same):
        rig.start_agent(node)
    rig.wait_phases({upgraded: "Done", same: "Done"})
    per_kernel_images(rig, rig.hosts[upgraded].kernel_release)
    rig.wait_phases({upgraded: "Done", same: "Done"}, timeout=120)
    missing = gpuctl(rig, "nodes", "--kernel-check", "--timeout", "120")
    assert missing.returncode == 1, missing.stderr + missing.stdout
    [header, line] = missing.stdout.splitlines()  # the node on its own kernel is not listed
    assert header.split()[:5] == ["NODE", "RUNNING", "NEXT", "GPUDRIVER", "VERDICT"]
    assert line.split()[:5] == [upgraded, "6.8.0-60-generic", NEXT_KERNEL, "gpu", "fail"]
    assert "ImagePullBackOff" in line or "ErrImagePull" in line, line
    rig.publish(OLD, NEXT_KERNEL)
    found = gpuctl(rig, "nodes", "--kernel-check", "--timeout", "120")
    assert found.returncode == 0, found.stderr + found.stdout
    assert "KMM: verified image exists" in found.stdout
    assert preflight_validations(rig) == []
