"""The supported skew between the CLI, the coordinator and the agents (gpuctl.common.version_skew):
one minor release either side of the coordinator; unknown is said, never taken as fine."""

from __future__ import annotations

from gpuctl.common.version_skew import Release, parse_release, skew_warnings


def test_releases_parse_and_garbage_does_not() -> None:
    assert parse_release("1.4.2") == Release(1, 4, 2)
    assert parse_release("v1.4.2-rc.1") == Release(1, 4, 2)
    assert parse_release("0.1.0+g1234") == Release(0, 1, 0)
    for garbage in ("", "unknown", "1.4", "main", "1.4.x"):
        assert parse_release(garbage) is None


def test_one_minor_either_side_is_supported() -> None:
    assert skew_warnings("1.4.0", "1.5.3", {"1.4.9": 3, "1.5.3": 10, "1.6.0": 1}) == []


def test_further_or_another_major_is_named_with_its_count() -> None:
    warnings = skew_warnings("1.2.0", "1.5.0", {"1.3.0": 2, "2.5.0": 1, "1.5.0": 4})
    assert warnings == [
        "this gpuctl 1.2.0 is more than 1 minor release from the coordinator 1.5.0: use a "
        "gpuctl 1.5.x",
        "2 node(s) run agent 1.3.0, more than 1 minor release from the coordinator 1.5.0: "
        "unsupported (upgrade the agent DaemonSet)",
        "1 node(s) run agent 2.5.0, more than 1 minor release from the coordinator 1.5.0: "
        "unsupported (upgrade the agent DaemonSet)",
    ]


def test_unknown_versions_are_said_unknown() -> None:
    assert skew_warnings("1.0.0", None, {"1.0.0": 1}) == [
        "the coordinator's version is unknown: skew not checked"
    ]
    assert skew_warnings("unknown", "1.0.0", {"unknown": 2}) == [
        "this gpuctl's version 'unknown' is not a release: skew not checked",
        "2 node(s) run an agent of unknown version 'unknown'",
    ]
