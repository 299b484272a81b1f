"""The GPUDriver CRD built from the pydantic model carries every field and validation rule.

That the committed file is what this builds is checked with every generated file, by
tests/generators/test_generate.py.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel

from gpuctl.crds.gpudriver import gpudriver_crd
from gpuctl.gpudriver import model


def _spec_schema() -> dict[str, Any]:
    version = gpudriver_crd()["spec"]["versions"][0]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def _model_fields(cls: type[BaseModel]) -> set[str]:
    return {f.alias or name for name, f in cls.model_fields.items()}


def test_schema_has_every_model_field() -> None:
    spec = _spec_schema()
    assert set(spec["properties"]) == _model_fields(model.GPUDriverSpec)
    kernel_module = spec["properties"]["kernelModule"]
    assert set(kernel_module["properties"]) == _model_fields(model.KernelModule)
    mapping = kernel_module["properties"]["kernelMappings"]["items"]
    assert set(mapping["properties"]) == _model_fields(model.KernelMapping)
    assert set(mapping["properties"]["build"]["properties"]) == _model_fields(model.Build)
    assert set(mapping["properties"]["registryTLS"]["properties"]) == {
        "insecure",
        "insecureSkipTLSVerify",
    }


def test_schema_is_structural() -> None:
    text = yaml.safe_dump(gpudriver_crd())
    for forbidden in ("anyOf", "$ref", "$defs", "title:", "null"):
        assert forbidden not in text


def test_defaults_and_required() -> None:
    kernel_module = _spec_schema()["properties"]["kernelModule"]
    assert kernel_module["properties"]["moduleName"]["default"] == "xe"
    assert kernel_module["required"] == ["kernelMappings"]
    assert kernel_module["properties"]["kernelMappings"]["minItems"] == 1
    mapping = kernel_module["properties"]["kernelMappings"]["items"]
    assert mapping["required"] == ["regexp"]
    build = mapping["properties"]["build"]
    assert build["required"] == ["dockerfileConfigMap"]
    assert build["properties"]["dockerfileConfigMap"]["required"] == ["name"]
    tls = kernel_module["properties"]["registryTLS"]["properties"]
    assert tls["insecure"]["type"] == tls["insecureSkipTLSVerify"]["type"] == "boolean"


def test_cel_rules_carry_clear_messages() -> None:
    kernel_module = _spec_schema()["properties"]["kernelModule"]
    messages = [r["message"] for r in kernel_module["x-kubernetes-validations"]]
    assert messages == [
        "modulesLoadingOrder must have at least 2 entries",
        "modulesLoadingOrder must start with moduleName",
        "modulesLoadingOrder must not contain duplicates",
        model.UNSIGNED_IMAGE_MESSAGE,
    ]
    sign = kernel_module["properties"]["sign"]
    assert [r["message"] for r in sign["x-kubernetes-validations"]] == [model.SIGNED_FILES_MESSAGE]
    assert sign["required"] == ["keySecret", "certSecret", "filesToSign"]
    mapping = kernel_module["properties"]["kernelMappings"]["items"]
    assert next(r["message"] for r in mapping["x-kubernetes-validations"]) == (
        "containerImage or build must be set"
    )


def test_crd_identity() -> None:
    crd = gpudriver_crd()
    assert crd["metadata"]["name"] == "gpudrivers.gpuctl.dev"
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["shortNames"] == ["gpud"]
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1"
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert {"Module", "Version", "KMM", "Age"} <= set(columns)


def test_version_and_parameters_are_bounded_with_clear_messages() -> None:
    kernel_module = _spec_schema()["properties"]["kernelModule"]["properties"]
    version = kernel_module["version"]
    assert version["maxLength"] == model.VERSION_MAX_LENGTH == 54
    assert [r["message"] for r in version["x-kubernetes-validations"]] == [model.VERSION_MESSAGE]
    parameters = kernel_module["parameters"]
    assert parameters["items"]["type"] == "string"
    assert [r["message"] for r in parameters["x-kubernetes-validations"]] == [
        model.PARAMETER_MESSAGE
    ]


def test_tolerate_all_taints_defaults_to_true() -> None:
    assert _spec_schema()["properties"]["tolerateAllTaints"] == {
        "default": True,
        "description": model.GPUDriverSpec.model_fields["tolerate_all_taints"].description,
        "type": "boolean",
    }
