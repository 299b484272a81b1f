"""gpuctl/rollout/input/driverless.py: a node is driverless only on its agent's word, in the
node's current boot; anything unknown is not."""

from __future__ import annotations

import datetime

from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from gpuctl.common import names
from gpuctl.rollout.input.build import Reads, rollout_input
from gpuctl.rollout.input.driverless import driverless
from gpuctl.rollout.input.settings import RolloutSettings

BOOT = "0f3c6f46-3c39-4f4d-9f39-4b6a3b9bd1a1"
OTHER_BOOT = "9c1d2e8a-77a2-4a7e-8a51-0c4a3e0f6b22"


def gpu_report(state: report_pb.Module.State.ValueType, *drivers: str) -> report_pb.NodeReport:
    module = report_pb.Module(name="xe", state=state)
    report = report_pb.NodeReport(node_name="gpu-1", module=module)
    for number, driver in enumerate(drivers):
        report.devices.add(pci_address=f"0000:0{number + 3}:00.0", vendor_id="8086", driver=driver)
    return report


NO_DRIVER = gpu_report(report_pb.Module.NOT_LOADED, "")


def test_no_xe_and_every_gpu_function_unbound_in_this_boot_is_driverless() -> None:
    assert driverless(NO_DRIVER, BOOT, BOOT)
    assert driverless(gpu_report(report_pb.Module.NOT_LOADED, "", ""), BOOT, BOOT)


def test_a_driver_anywhere_is_not_driverless() -> None:
    assert not driverless(gpu_report(report_pb.Module.LIVE, "xe"), BOOT, BOOT)
    assert not driverless(gpu_report(report_pb.Module.LIVE, ""), BOOT, BOOT)  # loaded, unbound
    assert not driverless(gpu_report(report_pb.Module.NOT_LOADED, "i915"), BOOT, BOOT)
    assert not driverless(gpu_report(report_pb.Module.NOT_LOADED, "", "vfio-pci"), BOOT, BOOT)
    assert not driverless(gpu_report(report_pb.Module.COMING, ""), BOOT, BOOT)


def test_unknown_is_not_driverless() -> None:
    assert not driverless(None, BOOT, BOOT)  # no report, or not known to be the latest
    assert not driverless(NO_DRIVER, OTHER_BOOT, BOOT)  # the agent's stream is of another boot
    assert not driverless(NO_DRIVER, BOOT, "")  # the kubelet posted no boot
    assert not driverless(gpu_report(report_pb.Module.NOT_LOADED), BOOT, BOOT)  # no GPU found
    unread = gpu_report(report_pb.Module.STATE_UNSPECIFIED, "")
    assert not driverless(unread, BOOT, BOOT)


def test_a_pass_reads_it_off_the_live_report_of_the_nodes_current_boot() -> None:
    def node(name: str) -> dict[str, object]:
        return {
            "metadata": {"name": name, "resourceVersion": "3", "labels": {}},
            "status": {"nodeInfo": {"bootID": BOOT}},
        }

    reads = Reads(
        driver={"metadata": {"name": "xe"}, "spec": {}},
        target="v2",
        settings=RolloutSettings(),
        previous={},
        namespace="gpuctl-system",
        nodes=[node("a"), node("b"), node("c")],
        wanted=frozenset({"a", "b", "c"}),
        claims=[],
        claims_trouble="",
        module=None,
        images_config=None,
        now=datetime.datetime(2026, 12, 7, tzinfo=datetime.UTC),
        live_reports={"a": (BOOT, NO_DRIVER), "b": (OTHER_BOOT, NO_DRIVER)},
    )
    facts = {n.name: n.driverless for n in rollout_input(reads).nodes}
    assert facts == {"a": True, "b": False, "c": False}
    assert names.STARTED_DRIVERLESS in names.PASS_DETAIL  # dropped once the node is done
