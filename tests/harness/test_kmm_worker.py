"""What a worker Pod does to the host's live modules (W1-W6)."""

from __future__ import annotations

from dataclasses import replace

from tests.harness import kmm_worker as worker
from tests.harness.kmm_model import Modprobe, ModprobeArgs, ModuleConfig

CONFIG = ModuleConfig(
    "6.8.0-45-generic",
    "img:1",
    in_tree_modules_to_remove=("xe", "i915"),
    modprobe=Modprobe(module_name="xe"),
)
ORDERED = replace(CONFIG, modprobe=Modprobe(module_name="xe", modules_loading_order=("xe", "dep")))


def test_in_tree_removal_takes_the_live_ones_in_list_order() -> None:
    assert worker.in_tree_to_remove(CONFIG, {"i915", "xe", "other"}) == ("xe", "i915")
    assert worker.in_tree_to_remove(CONFIG, {"i915"}) == ("i915",)
    assert worker.in_tree_to_remove(CONFIG, set()) == ()
    deprecated = replace(CONFIG, in_tree_modules_to_remove=(), in_tree_module_to_remove="xe")
    assert worker.in_tree_to_remove(deprecated, {"xe"}) == ("xe",)


def test_a_loader_on_a_live_xe_unloads_it_first() -> None:
    run = worker.run_loader(CONFIG, {"xe"}, held=False, fails=False)
    assert run == worker.Run(succeeded=True, unload=("xe",), removed=("xe",), loaded=("xe",))
    assert worker.run_loader(CONFIG, set(), held=False, fails=False) == worker.Run(
        succeeded=True, loaded=("xe",)
    )


def test_a_held_in_tree_module_fails_the_loader_with_ebusy() -> None:
    assert worker.run_loader(CONFIG, {"xe"}, held=True, fails=False) == worker.Run(
        succeeded=False, unload=("xe",)
    )
    # Nothing live to remove: held does not matter.
    assert worker.run_loader(CONFIG, set(), held=True, fails=False).succeeded


def test_a_failing_loader_touches_nothing() -> None:
    assert worker.run_loader(CONFIG, {"xe"}, held=False, fails=True) == worker.Run(False)


def test_unload_removes_the_loading_order_in_list_order_else_the_module() -> None:
    assert worker.unload_arguments(CONFIG) == ("xe",)
    assert worker.unload_arguments(ORDERED) == ("xe", "dep")
    raw = replace(CONFIG, modprobe=Modprobe(raw_args=ModprobeArgs(("xe",), ("-r", "xe"))))
    assert worker.unload_arguments(raw) == ()
    # W6: never the in-tree list.
    run = worker.run_unloader(CONFIG, {"xe", "i915"}, held=False)
    assert run == worker.Run(succeeded=True, unload=("xe",), removed=("xe",))


def test_loads_bring_the_whole_loading_order() -> None:
    assert worker.loaded_by(ORDERED) == ("xe", "dep")
    assert worker.loaded_by(CONFIG) == ("xe",)


def test_unloading_held_modules_fails_and_not_loaded_ones_succeed_silently() -> None:
    assert worker.run_unloader(ORDERED, {"xe", "dep"}, held=True) == worker.Run(
        succeeded=False, unload=("xe", "dep")
    )
    assert worker.run_unloader(ORDERED, set(), held=True) == worker.Run(
        succeeded=True, unload=("xe", "dep")
    )
