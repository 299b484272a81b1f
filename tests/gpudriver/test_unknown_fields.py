"""Fields of a newer CRD in a stored GPUDriver (gpuctl/gpudriver/unknown_fields.py): left out of
what the coordinator reads, at any depth, and named in a warning; never a refusal."""

from __future__ import annotations

from typing import Any

from gpuctl.gpudriver.known_issues import UNKNOWN_FIELDS, known_issues
from gpuctl.gpudriver.model import GPUDriverSpec, parse_spec
from gpuctl.gpudriver.unknown_fields import known_only, unknown_fields
from gpuctl.rollout.input.settings import rollout_settings
from tests.support import samples


def newer_spec() -> dict[str, Any]:
    spec = samples.full_spec()
    spec["kernelModule"]["kernelMappings"][0]["futureMappingField"] = True
    spec["rollout"] = {"maxUnavailable": 2, "futureSetting": "5m", "timeouts": {"bake": "1m"}}
    spec["futureTopLevel"] = {"a": 1}
    return spec


def test_every_unknown_field_is_named_with_its_path() -> None:
    assert unknown_fields(GPUDriverSpec, newer_spec(), "spec") == [
        "spec.kernelModule.kernelMappings[0].futureMappingField",
        "spec.rollout.futureSetting",
        "spec.rollout.timeouts.bake",
        "spec.futureTopLevel",
    ]
    assert unknown_fields(GPUDriverSpec, samples.full_spec()) == []


def test_reads_keep_what_is_known_and_drop_the_rest() -> None:
    spec = newer_spec()
    kept = known_only(GPUDriverSpec, spec)
    assert "futureTopLevel" not in kept
    assert kept["rollout"] == {"maxUnavailable": 2, "timeouts": {}}
    assert kept["kernelModule"]["kernelMappings"][1] == spec["kernelModule"]["kernelMappings"][1]
    parsed = parse_spec(spec)  # no refusal
    assert parsed.rollout is not None
    assert parsed.rollout.max_unavailable == 2
    assert rollout_settings(spec).max_unavailable == 2


def test_the_coordinator_warns_naming_the_fields() -> None:
    issues = [i for i in known_issues(newer_spec(), []) if i.reason == UNKNOWN_FIELDS]
    assert [i.message for i in issues] == [
        "spec.kernelModule.kernelMappings[0].futureMappingField, spec.rollout.futureSetting, "
        "spec.rollout.timeouts.bake, spec.futureTopLevel: not known to this gpuctl-coordinator, "
        "ignored (the GPUDriver CRD is newer than the coordinator: upgrade the coordinator to "
        "the chart's version)"
    ]
    assert [i.reason for i in known_issues(samples.full_spec(), [])].count(UNKNOWN_FIELDS) == 0
