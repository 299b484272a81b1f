"""What one rollout pass is about, before any node is read (pure): the target version, the
settings, and whether the rollout is refused.

The target is the Module's KMM version of the spec (none while the GPUDriver is deleted or
has no kernelModule: the nodes still targeted are unloaded). A rollout is refused while an
older GPUDriver loads the driver on the same nodes (starting one would fight it) or while
spec.rollout cannot be read; a refused pass finishes the steps begun, by the last readable
settings, and starts nothing (gpuctl/rollout/place/refused.py). The coordinator's worker and `gpuctl
rollout plan` both begin here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.gpudriver.conflicts import conflicting_driver
from gpuctl.gpudriver.module_spec import kmm_version
from gpuctl.rollout.input.settings import RolloutSettings, SettingsError, rollout_settings


@dataclass(frozen=True)
class PassSetup:
    # The Module's KMM version of the spec; None: unload every node still targeted.
    target: str | None
    # The settings this pass runs by: the spec's, or, where they cannot be read, the last
    # readable ones (None: none known).
    settings: RolloutSettings | None
    # Whether `settings` are the spec's own (the caller keeps them as the last readable).
    settings_read: bool
    # Why the rollout is refused ("" when it is not).
    refusal: str = ""


def pass_setup(
    driver: Mapping[str, Any],
    drivers: Iterable[Mapping[str, Any]],
    last_readable: RolloutSettings | None = None,
) -> PassSetup:
    deleting = bool((driver.get("metadata") or {}).get("deletionTimestamp"))
    spec = driver.get("spec") or {}
    target = kmm_version(spec) if spec.get("kernelModule") and not deleting else None
    rival = None if deleting else conflicting_driver(driver, drivers)
    refusal = (
        f"no rollout: GPUDriver {rival} already loads the driver on these nodes" if rival else ""
    )
    try:
        settings = rollout_settings(spec)
    except SettingsError as err:
        return PassSetup(target, last_readable, settings_read=False, refusal=refusal or str(err))
    return PassSetup(target, settings, settings_read=True, refusal=refusal)
