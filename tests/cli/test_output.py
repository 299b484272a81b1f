"""JSON/YAML output keeps the public contract: lowerCamelCase, every field, unknown left out."""

from __future__ import annotations

import json

import yaml

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.cli.output import to_json, to_yaml


def _report() -> pb.NodeReport:
    report = pb.NodeReport(node_name="n1", kernel_release="6.8.0")
    report.devices.add(pci_address="0000:03:00.0", vendor_id="0x8086", role=pb.Device.STANDALONE)
    report.module.CopyFrom(pb.Module(name="xe", state=pb.Module.LIVE))
    return report


def test_json_is_lower_camel_case_and_prints_empty_driver() -> None:
    document = json.loads(to_json(_report()))
    device = document["devices"][0]
    assert device["pciAddress"] == "0000:03:00.0"
    assert device["driver"] == ""
    assert device["role"] == "STANDALONE"
    assert document["kernelRelease"] == "6.8.0"


def test_unknown_refcnt_is_absent_not_zero() -> None:
    module = json.loads(to_json(_report()))["module"]
    assert "refcnt" not in module
    report = _report()
    report.module.refcnt = 0
    assert json.loads(to_json(report))["module"]["refcnt"] == 0


def test_yaml_is_the_same_document() -> None:
    report = _report()
    assert yaml.safe_load(to_yaml(report)) == json.loads(to_json(report))
