"""spec.rollout as the engine uses it: durations in seconds, maxUnavailable as a count.

Parsing is pure; a value the CRD let through but that cannot be used (it should not happen:
the schema and a CEL rule check both) raises SettingsError with the field named, and the
engine reports it instead of guessing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pydantic

from gpuctl.common.gpu_pods import DEFAULT_GPU_RESOURCES
from gpuctl.gpudriver import model
from gpuctl.gpudriver.unknown_fields import known_only
from gpuctl.rollout.input.windows import DAYS, MAX_DURATION, Window

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|ms|s|m|h)")
ROLLBACK = "Rollback"
PAUSE = "Pause"
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class SettingsError(ValueError):
    """spec.rollout cannot be used; the text names the field."""


def parse_duration(text: str) -> float:
    """Seconds in a Go duration ("90s", "1h30m", "500ms")."""
    if not text or not re.fullmatch(model.GO_DURATION_PATTERN, text):
        raise SettingsError(f"{text!r} is not a duration like 90s, 10m or 1h30m")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text))


@dataclass(frozen=True)
class Timeouts:
    check: float = 60.0
    drain: float = 600.0
    prepare: float = 120.0
    load: float = 600.0
    verify: float = 300.0


@dataclass(frozen=True)
class PauseSettings:
    """spec.rollout.pause: the node's own GPU daemons, paused while its driver changes."""

    # "namespace/name" of the DaemonSets whose pods are paused.
    daemon_sets: frozenset[str] = frozenset()
    # Pods with all these labels are paused too (empty: none by label).
    pod_selector: Mapping[str, str] = field(default_factory=dict)
    # Seconds a verified node waits for its paused pods to be back and Ready.
    timeout: float = 300.0

    @property
    def declared(self) -> bool:
        return bool(self.daemon_sets or self.pod_selector)


@dataclass(frozen=True)
class PrometheusGateSettings:
    url: str
    query: str
    timeout: float = 10.0
    # The oldest answer (seconds) a node may start on; 0: one asked for that start.
    max_answer_age: float = 0.0


@dataclass(frozen=True)
class RolloutSettings:
    max_unavailable: int | str = 1
    paused: bool = False
    hold_after_first_node: bool = True
    cordon: bool = True
    evict_gpu_pods: bool = False
    # spec.rollout.trustImageSignatures: unsigned-looking targets load on enforcing nodes.
    trust_image_signatures: bool = False
    unbind_idle_devices: bool = False
    disable_idle_vfs: bool = False
    verify_by: str = "backportTag"
    failure_budget: int = 1
    on_node_failure: str = PAUSE
    maintenance_windows: tuple[Window, ...] = ()
    prometheus_gate: PrometheusGateSettings | None = None
    soak_seconds: float = 0.0
    soak_each_batch: bool = False
    timeouts: Timeouts = Timeouts()
    pause: PauseSettings = PauseSettings()
    # spec.rollout.gpuResources: the extended resources that make a pod a GPU pod.
    gpu_resources: tuple[str, ...] = DEFAULT_GPU_RESOURCES
    # spec.rollout.drain.podSelector: other pods drained like GPU pods (empty: none).
    drain_pod_selector: Mapping[str, str] = field(default_factory=dict)

    @property
    def rolls_back(self) -> bool:
        """onNodeFailure: Rollback."""
        return self.on_node_failure == ROLLBACK

    @property
    def prepare_changes_node(self) -> bool:
        """True when the agent may change the node before the unload."""
        return self.unbind_idle_devices or self.disable_idle_vfs


def max_unavailable(value: int | str, total: int) -> int:
    """How many nodes may be unavailable at once, out of `total` targeted nodes."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise SettingsError(f"spec.rollout.maxUnavailable: {value} is less than 1")
        return value
    text = str(value)
    match = re.fullmatch(r"([0-9]{1,3})%", text)
    if match is None or not 1 <= int(match.group(1)) <= 100:
        raise SettingsError(
            f"spec.rollout.maxUnavailable: {text!r} is neither a number nor a percentage 1%-100%"
        )
    return max(1, math.floor(total * int(match.group(1)) / 100))


def _prometheus_gate(gates: model.RolloutGates | None) -> PrometheusGateSettings | None:
    if gates is None or gates.prometheus is None:
        return None
    gate = gates.prometheus
    try:
        timeout = parse_duration(gate.timeout)
    except SettingsError as err:
        raise SettingsError(f"spec.rollout.gates.prometheus.timeout: {err}") from None
    if timeout <= 0:
        raise SettingsError("spec.rollout.gates.prometheus.timeout: must be more than 0")
    try:
        max_age = parse_duration(gate.max_answer_age)
    except SettingsError as err:
        raise SettingsError(f"spec.rollout.gates.prometheus.maxAnswerAge: {err}") from None
    return PrometheusGateSettings(gate.url.rstrip("/"), gate.query, timeout, max_age)


def _window(index: int, window: model.MaintenanceWindow) -> Window:
    where = f"spec.rollout.maintenanceWindows[{index}]"
    try:
        duration = parse_duration(window.duration)
    except SettingsError as err:
        raise SettingsError(f"{where}.duration: {err}") from None
    if not 0 < duration <= MAX_DURATION.total_seconds():
        raise SettingsError(f"{where}.duration: {window.duration} is not within 1s..168h")
    try:
        zone = ZoneInfo(window.time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise SettingsError(
            f"{where}.timeZone: {window.time_zone!r} is not a time zone this coordinator knows "
            "(an IANA name such as Europe/Berlin)"
        ) from None
    hours, minutes = (int(part) for part in window.start.split(":"))
    return Window(
        days=frozenset(DAYS.index(day) for day in window.days),
        start=time(hours, minutes),
        duration=timedelta(seconds=duration),
        zone=zone,
    )


def _pause(pause: model.RolloutPause | None) -> PauseSettings:
    if pause is None:
        return PauseSettings()
    try:
        timeout = parse_duration(pause.timeout)
    except SettingsError as err:
        raise SettingsError(f"spec.rollout.pause.timeout: {err}") from None
    return PauseSettings(
        daemon_sets=frozenset(pause.daemon_sets),
        pod_selector=dict(pause.pod_selector or {}),
        timeout=timeout,
    )


def rollout_settings(spec: Mapping[str, Any]) -> RolloutSettings:
    """The settings of a GPUDriver spec (defaults where absent)."""
    try:
        parsed = model.Rollout.model_validate(known_only(model.Rollout, spec.get("rollout") or {}))
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SettingsError(f"spec.rollout.{where}: {first['msg']}") from None
    timeouts = {}
    for name in ("check", "drain", "prepare", "load", "verify"):
        try:
            timeouts[name] = parse_duration(getattr(parsed.timeouts, name))
        except SettingsError as err:
            raise SettingsError(f"spec.rollout.timeouts.{name}: {err}") from None
    max_unavailable(parsed.max_unavailable, 1)  # refuse a bad value now, not mid-rollout
    windows = tuple(_window(i, w) for i, w in enumerate(parsed.maintenance_windows or []))
    return RolloutSettings(
        max_unavailable=parsed.max_unavailable,
        paused=parsed.paused,
        hold_after_first_node=parsed.hold_after_first_node,
        cordon=parsed.cordon,
        evict_gpu_pods=parsed.evict_gpu_pods,
        trust_image_signatures=parsed.trust_image_signatures,
        unbind_idle_devices=parsed.unbind_idle_devices,
        disable_idle_vfs=parsed.disable_idle_vfs,
        verify_by=parsed.verify_by,
        failure_budget=parsed.failure_budget,
        on_node_failure=parsed.on_node_failure,
        maintenance_windows=windows,
        prometheus_gate=_prometheus_gate(parsed.gates),
        soak_seconds=float(parsed.soak_seconds),
        soak_each_batch=parsed.soak_each_batch,
        timeouts=Timeouts(**timeouts),
        pause=_pause(parsed.pause),
        gpu_resources=tuple(parsed.gpu_resources),
        drain_pod_selector=dict((parsed.drain.pod_selector or {}) if parsed.drain else {}),
    )
