"""The reference's known issues as GPUDriver warnings (gpuctl/gpudriver/known_issues.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.gpudriver.known_issues import (
    FIRMWARE_ON_CONTAINERD,
    NO_NODES,
    UNSUPPORTED_OS,
    KnownIssue,
    known_issues,
    new_warnings,
    supported_os,
)
from tests.support import samples

UBUNTU = "Ubuntu 26.04 LTS"
KERNEL = "7.0.0-15-generic"


def node(
    name: str,
    *,
    os_image: str | None = UBUNTU,
    runtime: str = "cri-o://1.34.1",
    labels: dict[str, str] | None = None,
    kernel: str = KERNEL,
) -> dict[str, Any]:
    info: dict[str, Any] = {"kernelVersion": kernel, "containerRuntimeVersion": runtime}
    if os_image is not None:
        info["osImage"] = os_image
    return {
        "metadata": {
            "name": name,
            "labels": labels or {"gpu": "yes", "kubernetes.io/arch": "amd64"},
        },
        "status": {"nodeInfo": info},
    }


def spec(**kernel_module: Any) -> dict[str, Any]:
    out = samples.minimal_spec()
    out["nodeSelector"] = {"gpu": "yes"}
    out["kernelModule"].update(kernel_module)
    return out


def reasons(issues: tuple[KnownIssue, ...]) -> list[str]:
    return [issue.reason for issue in issues]


def test_a_fleet_of_supported_nodes_has_no_known_issue() -> None:
    assert known_issues(spec(firmwarePath="/firmware"), [node("a"), node("b")]) == ()


def test_firmware_path_on_containerd_names_those_nodes_only() -> None:
    nodes = [
        node("a", runtime="containerd://2.1.4"),
        node("b"),
        node("c", runtime="containerd://1.7"),
    ]
    (issue,) = known_issues(spec(firmwarePath="/firmware"), nodes)
    assert issue.reason == FIRMWARE_ON_CONTAINERD
    assert issue.nodes == ("a", "c")
    assert "nodes a, c run containerd" in issue.message
    assert "firmwarePath is set (/firmware)" in issue.message


def test_containerd_without_a_firmware_path_is_fine() -> None:
    assert known_issues(spec(), [node("a", runtime="containerd://2.1.4")]) == ()


def test_a_containerd_node_the_driver_does_not_target_is_not_named() -> None:
    elsewhere = node("x", runtime="containerd://2", labels={"kubernetes.io/arch": "amd64"})
    assert known_issues(spec(firmwarePath="/fw"), [node("a"), elsewhere]) == ()


def test_unsupported_and_unreported_os_are_named_with_what_they_run() -> None:
    nodes = [node("a", os_image="Ubuntu 24.04.3 LTS"), node("b"), node("c", os_image=None)]
    (issue,) = known_issues(spec(), nodes)
    assert issue.reason == UNSUPPORTED_OS
    assert issue.nodes == ("a", "c")
    assert "nodes a (Ubuntu 24.04.3 LTS), c (OS not reported) do not run Ubuntu 26.04" in (
        issue.message
    )


@pytest.mark.parametrize(
    ("image", "supported"),
    [
        ("Ubuntu 26.04 LTS", True),
        ("Ubuntu 26.04.1 LTS", True),
        ("Ubuntu 26.04", True),
        ("Ubuntu 26.040", False),
        ("Ubuntu 24.04.3 LTS", False),
        ("Red Hat Enterprise Linux CoreOS 9.6", False),
        ("", False),
    ],
)
def test_supported_os(image: str, supported: bool) -> None:
    assert supported_os(image) is supported


def test_a_selector_that_matches_no_node_says_so() -> None:
    (issue,) = known_issues(spec(), [node("a", labels={"kubernetes.io/arch": "amd64"})])
    assert issue.reason == NO_NODES
    assert issue.message == (
        "the node selector (gpu=yes, kubernetes.io/arch=amd64) matches no node: the driver is "
        "loaded nowhere"
    )


def test_selected_nodes_no_mapping_serves_are_named_with_their_kernels() -> None:
    narrow = spec(kernelMappings=[{"regexp": "^6\\.", "containerImage": "r.example.com/xe:1"}])
    (issue,) = known_issues(narrow, [node("a"), node("b", kernel="")])
    assert issue.reason == NO_NODES
    assert issue.nodes == ("a", "b")
    assert f"a ({KERNEL}), b (kernel not reported); the driver is loaded nowhere" in issue.message


def test_no_kernel_module_no_issue() -> None:
    assert known_issues({"nodeSelector": {"gpu": "yes"}}, []) == ()


def test_every_issue_at_once_in_a_fixed_order() -> None:
    nodes = [node("a", runtime="containerd://2", os_image="Debian GNU/Linux 13 (trixie)")]
    assert reasons(known_issues(spec(firmwarePath="/fw"), nodes)) == [
        FIRMWARE_ON_CONTAINERD,
        UNSUPPORTED_OS,
    ]


def test_only_warnings_the_status_does_not_hold_yet_are_new() -> None:
    old, fresh = KnownIssue(UNSUPPORTED_OS, "old"), KnownIssue(NO_NODES, "fresh")
    assert new_warnings((old, fresh), {"warnings": ["old"]}) == (fresh,)
    assert new_warnings((old,), {}) == (old,)
