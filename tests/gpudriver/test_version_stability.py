"""Upgrading gpuctl must never re-roll the fleet: fixed GPUDriver specs keep their Module
version from release to release (tests/golden/kmm_versions.yaml).

The Module's version is a digest of the node config (module_spec.kmm_version) of the spec as
the API server stores it, CRD defaults applied (here: the model's defaults, from which the CRD's
are generated). If a release computes another version for the same spec, every node of every
GPUDriver is rolled again right after the upgrade, for nothing. The specs cover every field the
digest reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuctl.gpudriver.model import parse_spec
from gpuctl.gpudriver.module_spec import kmm_version

GOLDEN = Path(__file__).parent.parent / "golden" / "kmm_versions.yaml"
ENTRIES: list[dict[str, Any]] = yaml.safe_load(GOLDEN.read_text())


def as_stored(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec with the CRD's defaults, as the coordinator reads it back."""
    return parse_spec(spec).model_dump(by_alias=True, exclude_none=True, mode="json")


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["name"] for e in ENTRIES])
def test_a_fixed_spec_keeps_its_version(entry: dict[str, Any]) -> None:
    version = kmm_version(as_stored(entry["spec"]))
    assert version == entry["version"], (
        f"this release would re-roll every GPUDriver: spec {entry['name']!r} was version "
        f"{entry['version']}, is now {version} (a change to what module_spec.kmm_version digests "
        "or to a default that feeds it); keep the digest, or ship a migration "
        "(docs/deploying.md#upgrading)"
    )


def test_the_specs_cover_every_field_the_digest_reads() -> None:
    """Each kernelModule field that feeds the digest is set in some golden spec: a field
    missing here could change its encoding unnoticed."""
    used: set[str] = set()
    for entry in ENTRIES:
        kernel_module = entry["spec"]["kernelModule"]
        used |= set(kernel_module)
        for mapping in kernel_module["kernelMappings"]:
            used |= {f"kernelMappings[].{key}" for key in mapping}
    assert {
        "version",
        "moduleName",
        "parameters",
        "firmwarePath",
        "modulesLoadingOrder",
        "registryTLS",
        "sign",
        "kernelMappings[].regexp",
        "kernelMappings[].containerImage",
        "kernelMappings[].build",
        "kernelMappings[].sign",
        "kernelMappings[].registryTLS",
        "kernelMappings[].inTreeModulesToRemove",
    } <= used
