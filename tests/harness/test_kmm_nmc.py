"""The NMC reconciler's worker decisions (N1-N8) on plain data."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.harness import kmm_nmc as nmc
from tests.harness.kmm_model import (
    Modprobe,
    ModuleConfig,
    NodeView,
    SpecEntry,
    StatusEntry,
    ready_label,
    version_ready_label,
)

CONFIG = ModuleConfig("6.8.0-45-generic", "img:1", modprobe=Modprobe(module_name="xe"))
SPEC = SpecEntry(CONFIG, version="1")
STATUS = StatusEntry(CONFIG, version="1", boot_id="boot-1")
NEW_IMAGE = replace(SPEC, config=replace(CONFIG, container_image="img:2"))
NEW_KERNEL = replace(SPEC, config=replace(CONFIG, kernel_version="6.9.0-1-generic"))
REGISTRY_PULL = "registry-pull"
LOADER = nmc.WorkerPod(nmc.WorkerAction.LOAD, SPEC)
UNLOADER = nmc.WorkerPod(nmc.WorkerAction.UNLOAD, STATUS)
S = nmc.Step


@pytest.mark.parametrize(
    ("spec", "status", "rebooted", "expected"),
    [
        (SPEC, None, False, S.CREATE_LOADER),  # N1a
        (NEW_IMAGE, STATUS, False, S.CREATE_UNLOADER),  # N2: same kernel
        (NEW_KERNEL, STATUS, False, S.CREATE_LOADER),  # N1b: no unload
        (SPEC, STATUS, True, S.CREATE_LOADER),  # N1c
        (SPEC, STATUS, False, S.NOTHING),
        # Only the config counts: a new version or tolerations with the same config do nothing.
        (replace(SPEC, version="2", tolerations=({"key": "k"},)), STATUS, False, S.NOTHING),
    ],
)
def test_spec_without_a_worker(
    spec: SpecEntry, status: StatusEntry | None, rebooted: bool, expected: nmc.Step
) -> None:
    assert nmc.process_module_spec(spec, status, None, rebooted) is expected


def test_an_unloader_is_never_cancelled_by_the_spec() -> None:
    for spec in (SPEC, NEW_IMAGE, NEW_KERNEL):
        for restarts in (0, 3):
            worker = replace(UNLOADER, restarts=restarts)
            assert nmc.process_module_spec(spec, STATUS, worker, False) is S.NOTHING


def test_a_loader_is_replaced_only_after_a_restart_with_a_changed_spec() -> None:
    assert nmc.process_module_spec(NEW_IMAGE, None, LOADER, False) is S.NOTHING
    restarted = replace(LOADER, restarts=1)
    assert nmc.process_module_spec(SPEC, None, restarted, False) is S.NOTHING
    assert nmc.process_module_spec(NEW_IMAGE, None, restarted, False) is S.DELETE_WORKER
    # The hash covers the whole entry, version and tolerations too.
    assert nmc.process_module_spec(replace(SPEC, version="2"), None, restarted, False) is (
        S.DELETE_WORKER
    )


@pytest.mark.parametrize(
    ("worker", "rebooted", "expected"),
    [
        (None, False, S.CREATE_UNLOADER),
        (None, True, S.DROP_STATUS),
        (LOADER, False, S.DELETE_WORKER),  # a loader is cancelled
        (UNLOADER, False, S.NOTHING),
        (replace(UNLOADER, restarts=5), False, S.NOTHING),
        (
            replace(UNLOADER, restarts=1, built_from=replace(STATUS, version="0")),
            False,
            S.DELETE_WORKER,
        ),
    ],
)
def test_orphan_status(worker: nmc.WorkerPod | None, rebooted: bool, expected: nmc.Step) -> None:
    assert nmc.process_orphan_status(STATUS, worker, rebooted) is expected


def test_rebooted_needs_ready_and_another_boot_id() -> None:
    assert not nmc.rebooted(NodeView("n", {}, boot_id="boot-1"), STATUS)
    assert nmc.rebooted(NodeView("n", {}, boot_id="boot-2"), STATUS)
    assert not nmc.rebooted(NodeView("n", {}, boot_id="boot-2", ready=False), STATUS)


def test_a_finished_loader_writes_what_it_was_built_from() -> None:
    status = nmc.status_after_load(replace(SPEC, image_repo_secret=REGISTRY_PULL), "boot-9")
    assert status == StatusEntry(
        CONFIG, version="1", image_repo_secret=REGISTRY_PULL, boot_id="boot-9"
    )


def test_orphan_workers_have_neither_spec_nor_status() -> None:
    assert nmc.is_orphan_worker(None, None)
    assert not nmc.is_orphan_worker(SPEC, None)
    assert not nmc.is_orphan_worker(None, STATUS)


READY = ready_label("ns", "xe")
VERSION_READY = version_ready_label("ns", "xe")


def test_ready_labels_appear_once_when_configs_match() -> None:
    assert nmc.ready_label_changes({}, "ns", "xe", SPEC, STATUS) == {READY: "", VERSION_READY: "1"}
    unversioned = replace(STATUS, version="")
    assert nmc.ready_label_changes({}, "ns", "xe", SPEC, unversioned) == {READY: ""}
    # Already there: the version label is not rewritten.
    assert nmc.ready_label_changes({READY: "", VERSION_READY: "0"}, "ns", "xe", SPEC, STATUS) == {}
    assert nmc.ready_label_changes({}, "ns", "xe", SPEC, None) == {}


def test_ready_labels_stay_through_a_config_change_and_go_with_both_entries() -> None:
    labels = {READY: "", VERSION_READY: "1"}
    assert nmc.ready_label_changes(labels, "ns", "xe", NEW_IMAGE, STATUS) == {}
    assert nmc.ready_label_changes(labels, "ns", "xe", NEW_IMAGE, None) == {}
    assert nmc.ready_label_changes(labels, "ns", "xe", None, STATUS) == {}
    assert nmc.ready_label_changes(labels, "ns", "xe", None, None) == {
        READY: None,
        VERSION_READY: None,
    }


def test_unschedulable_entries_lose_their_ready_labels() -> None:
    labels = {READY: "", VERSION_READY: "1", "other": ""}
    assert nmc.unschedulable_label_removals(labels, "ns", "xe") == {
        READY: None,
        VERSION_READY: None,
    }
    assert nmc.unschedulable_label_removals({}, "ns", "xe") == {}


def test_ready_label_modules_skip_version_ready_and_other_namespaces() -> None:
    labels = {
        READY: "",
        VERSION_READY: "1",
        ready_label("other", "xe"): "",
        "kmm.node.kubernetes.io/x.ready": "",
    }
    assert nmc.ready_label_modules(labels, "ns") == {"xe"}
