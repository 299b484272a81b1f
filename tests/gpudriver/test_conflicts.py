"""Two GPUDrivers that could target the same node: the newer one yields."""

from __future__ import annotations

from typing import Any

from gpuctl.gpudriver.conflicts import conflicting_driver
from tests.support import samples


def drv(name: str, created: str, selector: dict[str, str] | None, nfd: bool = False) -> Any:
    spec: dict[str, Any] = samples.minimal_spec()
    if selector is not None:
        spec["nodeSelector"] = selector
    if nfd:
        spec["useNFDLabeling"] = True
    return samples.driver(name, spec, created=created, uid=name)


OLD = "2026-11-01T00:00:00Z"
NEW = "2026-11-02T00:00:00Z"


def test_newer_driver_with_overlapping_selector_conflicts() -> None:
    first = drv("first", OLD, {"pool": "a"})
    second = drv("second", NEW, {"zone": "z"})
    assert conflicting_driver(second, [first, second]) == "first"
    assert conflicting_driver(first, [first, second]) is None


def test_disjoint_selectors_do_not_conflict() -> None:
    first = drv("first", OLD, {"pool": "a"})
    second = drv("second", NEW, {"pool": "b"})
    assert conflicting_driver(second, [first, second]) is None


def test_same_creation_time_is_decided_by_name() -> None:
    a = drv("a", OLD, None)
    b = drv("b", OLD, None)
    assert conflicting_driver(b, [a, b]) == "a"
    assert conflicting_driver(a, [a, b]) is None


def test_drivers_without_kernel_module_never_conflict() -> None:
    first = samples.driver("first", {"nodeSelector": {}}, created=OLD, uid="1")
    second = drv("second", NEW, None)
    assert conflicting_driver(second, [first, second]) is None
    assert conflicting_driver(first, [first, second]) is None


def test_oldest_rival_is_named() -> None:
    oldest = drv("oldest", "2026-10-01T00:00:00Z", None)
    middle = drv("middle", OLD, None)
    newest = drv("newest", NEW, None)
    assert conflicting_driver(newest, [middle, newest, oldest]) == "oldest"
