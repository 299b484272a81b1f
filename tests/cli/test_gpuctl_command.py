"""The installed `gpuctl` command, run as a subprocess on fake host roots."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from testbed.fakehost import scenarios

GPUCTL = str(Path(sys.executable).parent / "gpuctl")


def gpuctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPUCTL, *args], capture_output=True, text=True, check=False, timeout=60)


def test_json_is_the_node_report_contract(tmp_path: Path) -> None:
    scenarios.open_render_clients(tmp_path)
    done = gpuctl("node", "inspect", "--local", "--host-root", str(tmp_path), "-o", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["nodeName"] == "gpu-node-1"
    assert report["kernelRelease"] == "6.8.0-60-generic"
    (device,) = report["devices"]
    assert (device["pciAddress"], device["deviceId"], device["driver"]) == (
        "0000:03:00.0",
        "0xe20b",
        "xe",
    )
    assert sorted((c["pid"], c["clientIds"]) for c in device["clients"]) == [
        (2101, ["42"]),
        (2102, ["42"]),
        (2200, ["43"]),
    ]
    assert [b["reason"] for b in report["blockers"]] == ["OPEN_CLIENTS"]
    assert report["module"]["state"] == "LIVE"
    assert report["clientScan"]["state"] == "COMPLETE"


def test_yaml_matches_json(tmp_path: Path) -> None:
    scenarios.dkms_out_of_tree(tmp_path)
    as_json = gpuctl("node", "inspect", "--local", "--host-root", str(tmp_path), "-o", "json")
    as_yaml = gpuctl("node", "inspect", "--local", "--host-root", str(tmp_path), "-o", "yaml")
    assert as_json.returncode == as_yaml.returncode == 0
    from_json, from_yaml = json.loads(as_json.stdout), yaml.safe_load(as_yaml.stdout)
    for document in (from_json, from_yaml):
        document.pop("observedAt")
    assert from_json == from_yaml
    assert from_yaml["module"]["provenance"] == "OUT_OF_TREE"
    assert from_yaml["module"]["backportTag"] == scenarios.BACKPORT_TAG


def test_table_shows_vfs_under_their_pf_and_the_blockers(tmp_path: Path) -> None:
    scenarios.two_pro_b70_with_vfs(tmp_path, vf_driver="vfio-pci")
    done = gpuctl("node", "inspect", "--local", "--host-root", str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.startswith("ADDRESS"))
    assert header.split() == ["ADDRESS", "MODEL", "DRIVER", "VFS", "CLIENTS"]
    pf_rows = [line for line in lines if line.startswith("0000:")]
    vf_rows = [line for line in lines if line.startswith("  0000:")]
    assert len(pf_rows) == 2
    assert len(vf_rows) == 8
    assert all("4/12" in row for row in pf_rows)
    assert "Unloading xe now would fail or hurt:" in done.stdout
    assert done.stdout.count("has 4 VFs enabled") == 2


def test_host_root_that_does_not_exist_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = gpuctl("node", "inspect", "--local", "--host-root", str(tmp_path / "missing"))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == f"gpuctl: host root {tmp_path / 'missing'}: does not exist\n"


def test_host_root_that_is_not_linux_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    done = gpuctl("node", "inspect", "--local", "--host-root", str(tmp_path))
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert "not a Linux root" in done.stderr
    assert "Traceback" not in done.stderr


def test_inspect_without_local_says_what_to_do() -> None:
    done = gpuctl("node", "inspect")
    assert done.returncode == 2
    assert "--local" in done.stderr


def test_help_lists_formats_and_exit_codes() -> None:
    done = gpuctl("node", "inspect", "--help")
    assert done.returncode == 0
    assert "table (default)" in done.stdout
    assert "jsonpath=TEMPLATE" in done.stdout
    assert "exit codes" in done.stdout


def test_this_machine_reports_only_display_functions() -> None:
    done = gpuctl("node", "inspect", "--local", "-o", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["kernelRelease"] == Path("/proc/sys/kernel/osrelease").read_text().strip()
    assert all(d["classCode"].startswith("0x03") for d in report["devices"])
