"""spec.rollout parsing: defaults, Go durations, maxUnavailable as a count or a percentage."""

from __future__ import annotations

import pytest

from gpuctl.rollout.input.settings import (
    SettingsError,
    max_unavailable,
    parse_duration,
    rollout_settings,
)


def test_defaults_suit_a_cautious_admin() -> None:
    settings = rollout_settings({})
    assert settings.max_unavailable == 1
    assert (settings.paused, settings.hold_after_first_node, settings.cordon) == (
        False,
        True,
        True,
    )
    assert not (settings.evict_gpu_pods)
    assert not (settings.unbind_idle_devices)
    assert not (settings.disable_idle_vfs)
    assert settings.verify_by == "backportTag"
    assert settings.failure_budget == 1
    timeouts = settings.timeouts
    assert (timeouts.check, timeouts.drain, timeouts.prepare, timeouts.load, timeouts.verify) == (
        60,
        600,
        120,
        600,
        300,
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("10m", 600), ("1h30m", 5400), ("500ms", 0.5), ("1.5s", 1.5)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10", "ten minutes", "5d", "-1s"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(SettingsError):
        parse_duration(text)


def test_bad_timeout_names_its_field() -> None:
    with pytest.raises(SettingsError, match=r"spec\.rollout\.timeouts\.drain"):
        rollout_settings({"rollout": {"timeouts": {"drain": "forever"}}})


@pytest.mark.parametrize(
    ("value", "total", "allowed"),
    [(1, 10, 1), (3, 10, 3), ("25%", 10, 2), ("10%", 5, 1), ("100%", 7, 7), ("50%", 0, 1)],
)
def test_max_unavailable(value: int | str, total: int, allowed: int) -> None:
    assert max_unavailable(value, total) == allowed


@pytest.mark.parametrize("value", [0, -1, "0%", "101%", "a%", "two"])
def test_bad_max_unavailable_is_refused(value: int | str) -> None:
    with pytest.raises(SettingsError, match="maxUnavailable"):
        max_unavailable(value, 10)


def test_a_newer_crds_fields_are_ignored_and_known_ones_still_checked() -> None:
    """The API server prunes what users mistype; what reaches the coordinator unknown is a
    newer CRD's (gpuctl/gpudriver/unknown_fields.py): read past, never a refusal."""
    assert (
        rollout_settings({"rollout": {"futureSetting": 2, "maxUnavailable": 3}}).max_unavailable
        == 3
    )
    with pytest.raises(SettingsError, match=r"spec\.rollout\.maxUnavailable"):
        rollout_settings({"rollout": {"futureSetting": 2, "maxUnavailable": "x"}})
