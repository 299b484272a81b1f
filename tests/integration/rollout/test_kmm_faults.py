"""KMM itself misbehaving under a rollout: its manager SIGKILLed while a worker is loading or
unloading, a worker Pod deleted mid-run, its webhook down while gpuctl updates the Module, and
no image for one node's kernel.

Real KMM (testbed/harness/real_kmm.py) under the real coordinator and agents. Each test ends, as
every rollout test does (RolloutRig.close), asserting that no unload was attempted on a busy
node; each shows every node ending Done and verified at the target, or held with a reason
that names what KMM did.
"""

from __future__ import annotations

import json

import pytest

from gpuctl.common import names
from testbed.harness.kmm_build import DEFAULT_VERSION, MAIN_VERSION
from testbed.harness.waiting import wait_until
from testbed.rollout_live.fake_nodes import gpu_node_root
from testbed.rollout_live.images import IMAGE_REPOSITORY, NEW, OLD, image_of
from testbed.rollout_live.rig import RolloutRig
from testbed.rollout_live.scenario import (
    FAST,
    TIMEOUTS,
    busy_with_ollama,
    idle_again,
    module_version,
    old_root,
    start,
    wait_status,
)

pytestmark = pytest.mark.integration

SLOW_KMM_SECONDS = 2.0  # every worker container starts this late: a window to break KMM in
OTHER_KERNEL = "6.8.0-61-generic"  # a node that booted a kernel the new build was not made for


def slow_start(rig: RolloutRig, shorts: list[str]) -> list[str]:
    """`start`, then every node's KMM worker starts SLOW_KMM_SECONDS after its creation."""
    nodes = start(rig, shorts, FAST)
    for node in nodes:
        rig.kmm.delay_node(node, SLOW_KMM_SECONDS)
    return nodes


def assert_all_at_new(rig: RolloutRig, nodes: list[str]) -> None:
    rig.wait_phases(dict.fromkeys(nodes, "Done"), timeout=180)
    rig.wait_kmm_loaded(nodes)
    assert [module_version(rig, node) for node in nodes] == [NEW] * len(nodes)
    assert rig.kernels.violations == []


@pytest.mark.own_kmm
# An unloader at both KMM versions (KMM never cancels one it started); a loader at the pinned one.
@pytest.mark.parametrize(
    ("kmm_version", "action"),
    [(DEFAULT_VERSION, "Unload"), (MAIN_VERSION, "Unload"), (DEFAULT_VERSION, "Load")],
)
def test_kmm_killed_while_its_worker_runs_strands_no_node(
    rollout_rig: RolloutRig, action: str
) -> None:
    rig = rollout_rig
    nodes = slow_start(rig, ["a", "b", "c"])
    busy_with_ollama(rig, nodes[2])
    rig.set_version(NEW)
    wait_until(f"a {action} worker Pod", lambda: rig.worker_pods(action), timeout_seconds=90)
    rig.kmm.operator.kill()  # SIGKILL: KMM stops mid-reconcile; its worker Pod runs on
    rig.kmm.operator.start()
    rig.wait_phases({nodes[0]: "Done", nodes[1]: "Done", nodes[2]: "Blocked"}, timeout=180)
    assert module_version(rig, nodes[2]) != NEW
    idle_again(rig, nodes[2])
    assert_all_at_new(rig, nodes)
    assert rig.kmm.operator.starts == 2


def test_a_worker_pod_deleted_mid_run_is_made_again_and_the_node_finishes(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    nodes = slow_start(rig, ["a", "b"])
    rig.set_version(NEW)
    [pod] = wait_until("a worker Pod", lambda: rig.worker_pods("Unload"), timeout_seconds=90)
    name = pod["metadata"]["name"]
    rig.kube.request("DELETE", f"/api/v1/namespaces/{rig.namespace}/pods/{name}")
    assert_all_at_new(rig, nodes)


@pytest.mark.own_kmm
def test_kmms_webhook_down_holds_the_module_update_and_the_rollout_waits(
    rollout_rig: RolloutRig,
) -> None:
    """KMM's webhook (failurePolicy Fail) refuses every Module write while it is down: the
    coordinator cannot move the Module to the new version, so no node starts; once it is back,
    the rollout goes."""
    rig = rollout_rig
    nodes = start(rig, ["a", "b"], FAST)
    rig.kmm.webhook.kill()
    rig.set_version(NEW)
    target = rig.target()
    status = wait_status(
        rig,
        f"waits for the Module to ask for {target}",
        lambda s: s.get("targetVersion") == target and "waiting for Module" in s.get("message", ""),
        timeout=90,
    )
    assert status["counts"]["Loading"] == 0, json.dumps(status)
    assert [module_version(rig, node) for node in nodes] == [OLD, OLD]
    rig.kmm.webhook.start()
    assert_all_at_new(rig, nodes)


def test_no_image_for_one_nodes_kernel_keeps_its_driver_blocked_naming_the_image(
    rollout_rig: RolloutRig,
) -> None:
    """The new version maps the node on another kernel to an image tag nobody pushed. KMM's
    ordered upgrade would unload the old module as soon as the version label flips, then find
    no image (its pull fails and is retried) and write no config: the node left without a
    driver. So the reload waits for KMM's ModuleImagesConfig to say the image exists: the node
    stays loaded at the old version, Blocked with the image named, nothing unloaded. Once the
    image is pushed KMM finds it, the Blocked node is checked again and goes to the new
    version. The other node finishes meanwhile."""
    rig = rollout_rig
    same = rig.add_node("a", old_root)
    other = rig.add_node(
        "b",
        lambda root: gpu_node_root(root, OLD, kernel_release=OTHER_KERNEL),
        kernel_release=OTHER_KERNEL,
    )
    rig.create_driver(OLD, {**FAST, "timeouts": {**TIMEOUTS, "check": "10s"}})
    rig.start_coordinator()
    for node in (same, other):
        rig.start_agent(node)
    rig.wait_phases({same: "Done", other: "Done"})
    rig.wait_kmm_loaded([same, other])
    rig.kernels.begin()
    # The other kernel's builds live in a repository nobody has pushed NEW to yet.
    missing_template = f"{IMAGE_REPOSITORY}-next:{NEW}-$KERNEL_FULL_VERSION"
    missing = f"{IMAGE_REPOSITORY}-next:{NEW}-{OTHER_KERNEL}"
    only_other = f"^{OTHER_KERNEL.replace('.', '[.]')}$"
    rig.patch_driver(
        {
            "spec": {
                "kernelModule": {
                    "version": NEW,
                    "kernelMappings": [
                        {"regexp": only_other, "containerImage": missing_template},
                        {"regexp": "^.+$", "containerImage": image_of(NEW)},
                    ],
                }
            }
        }
    )
    rig.wait_phases({same: "Done", other: "Blocked"}, timeout=120)
    reason = rig.annotation(other, names.REASON)
    assert f"KMM has not found image {missing} for the node's kernel" in reason, reason
    assert "the reload would unload" in reason, reason
    assert rig.annotation(other, names.REASON_KIND) == "image-not-ready"
    assert module_version(rig, same) == NEW
    assert module_version(rig, other) == OLD  # still loaded: nothing was unloaded
    assert rig.kernels.unloads.count(other) == 0
    assert [node for node, _ in rig.kernels.loads] == [same]

    rig.publish(NEW, OTHER_KERNEL, image=missing)
    rig.wait_phases({same: "Done", other: "Done"}, timeout=120)
    assert module_version(rig, other) == NEW
    assert rig.kernels.unloads.count(other) == 1  # the old module, once the new one can load
