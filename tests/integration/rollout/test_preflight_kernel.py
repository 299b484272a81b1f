"""`gpuctl preflight --kernel K` on KMM's own operator: before nodes boot a new kernel, is
there an image for it? KMM's PreflightValidation pulls the image the mapping names for K (the
stand-in kubelet runs KMM's pull Pod against the test's image catalogue): missing, the
command says so in the kubelet's words and exits 1; pushed, it exits 0. The real `gpuctl`
binary, the real API server, real KMM; the PreflightValidation is gone afterwards.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from gpuctl.common import names
from testbed.rollout_live.rig import BIN, IMAGE_REPOSITORY, OLD, RolloutRig, image_of
from testbed.rollout_live.scenario import FAST, start

pytestmark = pytest.mark.integration

NEXT_KERNEL = "6.8.0-61-generic"


def preflight(rig: RolloutRig, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "gpuctl"), "preflight", *args, "--kubeconfig", str(rig.cluster.kubeconfig)],
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
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
    per_kernel = f"{IMAGE_REPOSITORY}:{OLD}-$KERNEL_FULL_VERSION"
    running = rig.hosts[node].kernel_release
    rig.patch_driver(
        {
            "spec": {
                "kernelModule": {
                    "kernelMappings": [
                        {
                            "regexp": f"^{running.replace('.', '[.]')}$",
                            "containerImage": image_of(OLD),
                        },
                        {"regexp": "^.+$", "containerImage": per_kernel},
                    ]
                }
            }
        }
    )
    rig.wait_phases({node: "Done"}, timeout=120)  # the new configuration, on the same image
    missing = preflight(rig, "--kernel", NEXT_KERNEL, "-o", "json", "--timeout", "120")
    assert missing.returncode == 1, missing.stderr + missing.stdout
    [verdict] = json.loads(missing.stdout)
    assert verdict["outcome"] == "fail"
    assert verdict["image"] == f"{IMAGE_REPOSITORY}:{OLD}-{NEXT_KERNEL}"
    assert verdict["imageExists"] is False
    assert verdict["imageCheck"].startswith(("ErrImagePull", "ImagePullBackOff")), verdict
    assert verdict["signing"].startswith("unsigned")
    rig.publish(OLD, NEXT_KERNEL, image=f"{IMAGE_REPOSITORY}:{OLD}-{NEXT_KERNEL}")
    found = preflight(rig, "--kernel", NEXT_KERNEL, "--timeout", "120")
    assert found.returncode == 0, found.stderr + found.stdout
    assert f"kernel {NEXT_KERNEL}: PASS" in found.stdout
    assert "found:   KMM: verified image exists" in found.stdout
    assert preflight_validations(rig) == []  # each run removed its own
