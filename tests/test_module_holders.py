"""The shared holders rule: which holders of a module still block KMM's unload."""

from __future__ import annotations

from gpuctl.common.module_holders import holders_unloaded_with, modules_unloaded_with


def test_holders_listed_in_the_unload_do_not_block() -> None:
    assert holders_unloaded_with(["xe_compat"], ["xe_compat", "drm_gpuvm"]) == []


def test_holders_not_listed_still_block_in_their_order() -> None:
    assert holders_unloaded_with(["xe_debug", "xe_compat", "kvmgt"], ["xe_compat"]) == [
        "xe_debug",
        "kvmgt",
    ]
    assert holders_unloaded_with(["xe_compat"], []) == ["xe_compat"]


def test_the_unload_removes_the_loading_order_after_its_first_entry() -> None:
    assert modules_unloaded_with(["xe", "xe_compat", "drm_buddy"]) == ["xe_compat", "drm_buddy"]
    assert modules_unloaded_with(None) == []
    assert modules_unloaded_with([]) == []
