"""What a KMM worker Pod does to a node's kernel, as pure rules over the set of live modules.

Sources: internal/worker/worker.go (LoadKmod, UnloadKmod), cmd/worker/funcs_kmod.go,
internal/pod/workerpodmanager.go (softdep config, P4/P5), and kmod's tools/modprobe.c for what
``modprobe -r`` does (a module that is not loaded is a silent success; one in use fails with
EBUSY).

Simplifications: every module named in ``inTreeModulesToRemove`` is taken to have a file under
``/lib/modules`` (true of ``xe`` on a distro kernel), so W1 removes exactly the live ones; a
*held* node fails the whole ``modprobe -r`` (nothing is removed); ``rawArgs`` are not parsed (a
rawArgs load or unload changes no module the emulator tracks); firmware files are not modelled.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from tests.harness.kmm_model import ModuleConfig


def in_tree_to_remove(config: ModuleConfig, live: Collection[str]) -> tuple[str, ...]:
    """W1 (LoadKmod step 1): inTreeModulesToRemove (else the deprecated single name), in list
    order, that are live: the loader removes them with one ``modprobe -rv`` before loading,
    and a failure there aborts the load. Whatever loaded them (the distro, or KMM itself with
    this very name) does not matter to modprobe."""
    names = config.in_tree_modules_to_remove
    if not names and config.in_tree_module_to_remove:
        names = (config.in_tree_module_to_remove,)
    return tuple(name for name in names if name in live)


def loaded_by(config: ModuleConfig) -> tuple[str, ...]:
    """W3 + P4: ``modprobe <moduleName>`` with the softdep config loads the whole
    modulesLoadingOrder (pre: dependencies first); without one, just moduleName."""
    if config.modprobe.raw_args is not None or not config.modprobe.module_name:
        return ()
    return config.modprobe.modules_loading_order or (config.modprobe.module_name,)


def unload_arguments(config: ModuleConfig) -> tuple[str, ...]:
    """W4 (main, UnloadKmod): ``modprobe -rvd /tmp/<dirName> [args.unload]`` then the whole
    modulesLoadingOrder in list order, else moduleName. v2.6.0 (W5) passes only moduleName and
    mounts the softdep config, which makes kmod remove the rest after it: the same modules
    leave the host. Unload never touches inTreeModulesToRemove (W6)."""
    if config.modprobe.raw_args is not None or not config.modprobe.module_name:
        return ()
    return config.modprobe.modules_loading_order or (config.modprobe.module_name,)


@dataclass(frozen=True)
class Run:
    """One run of a worker container: ``unload`` is what its ``modprobe -r`` tried to remove
    (empty: it ran none), ``succeeded`` False means the container failed (it restarts)."""

    succeeded: bool
    unload: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    loaded: tuple[str, ...] = ()


def run_loader(config: ModuleConfig, live: Collection[str], held: bool, fails: bool) -> Run:
    """W1-W3 (LoadKmod). ``fails``: the Pod fails before the worker runs (an image that cannot
    be pulled, say), so nothing is touched. ``held``: the in-tree removal fails with EBUSY."""
    if fails:
        return Run(succeeded=False)
    in_tree = in_tree_to_remove(config, live)
    if in_tree and held:
        return Run(succeeded=False, unload=in_tree)
    return Run(succeeded=True, unload=in_tree, removed=in_tree, loaded=loaded_by(config))


def run_unloader(config: ModuleConfig, live: Collection[str], held: bool) -> Run:
    """W4 (UnloadKmod): modules that are not live are a silent success; ``held`` and any of
    them live: EBUSY, the container fails."""
    arguments = unload_arguments(config)
    present = tuple(name for name in arguments if name in live)
    if present and held:
        return Run(succeeded=False, unload=arguments)
    return Run(succeeded=True, unload=arguments, removed=present)
