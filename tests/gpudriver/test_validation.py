"""What CEL cannot check, checked by the coordinator before it writes anything."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.gpudriver import model
from gpuctl.gpudriver.model import PARAMETER_MESSAGE, VERSION_MESSAGE
from gpuctl.gpudriver.validation import (
    FieldError,
    expand_template_variables,
    image_problem,
    regexp_problem,
    validate,
)
from tests.support import samples


@pytest.mark.parametrize(
    "image",
    [
        "registry.example.com/xe-driver:1.0",
        "reg.example.com:5000/team/xe:v7.1.4.6_260728.7-$KERNEL_FULL_VERSION",
        "reg.example.com/xe:${KERNEL_FULL_VERSION}",
        "reg.example.com/$MOD_NAME:1.0",
        "xe:$KERNEL_FULL_VERSION",
        "localhost:5000/xe:1",
        "Reg.Example.COM/xe:1",
        "reg.example.com/xe@sha256:" + "a" * 64,
        "reg.example.com/xe:1.0@sha256:" + "b" * 64,
    ],
)
def test_images_with_tag_or_digest_are_accepted(image: str) -> None:
    assert image_problem(image) is None


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("registry.example.com/xe-driver", "needs an explicit tag or digest"),
        ("reg.example.com:5000/xe", "needs an explicit tag or digest"),
        ("reg.example.com/xe-$KERNEL_FULL_VERSION", "needs an explicit tag or digest"),
        ("reg.example.com/xe@sha256:abc", "malformed digest"),
        ("reg.example.com/xe:", "invalid tag"),
        ("reg.example.com/xe:$", "malformed template variable"),
        ("reg.example.com/XE:1", "repository path is lowercase"),
    ],
)
def test_images_without_usable_tag_are_refused(image: str, expected: str) -> None:
    problem = image_problem(image)
    assert problem is not None
    assert expected in problem
    assert repr(image) in problem


def test_template_variables_are_expanded_in_both_forms() -> None:
    expanded = expand_template_variables("r/$MOD_NAME:${KERNEL_FULL_VERSION}-$X_1")
    assert "$" not in expanded
    assert expanded.startswith("r/")


@pytest.mark.parametrize(
    "pattern", ["^.+$", "^5\\.14\\.0-.*\\.el9.*\\.x86_64$", "7.0.0-.*-generic"]
)
def test_good_regexps(pattern: str) -> None:
    assert regexp_problem(pattern) is None


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("^(6\\.8", "does not compile"),
        ("[a-", "does not compile"),
        ("^6(?=\\.8)", "RE2"),
        ("(a)\\1", "RE2"),
    ],
)
def test_bad_regexps(pattern: str, expected: str) -> None:
    problem = regexp_problem(pattern)
    assert problem is not None
    assert expected in problem


def test_valid_driver_has_no_errors() -> None:
    assert validate(samples.driver(spec=samples.full_spec()), samples.NAMESPACE) == []


def test_driver_without_kernel_module_has_no_errors() -> None:
    assert validate(samples.driver(spec={}), samples.NAMESPACE) == []


def test_errors_name_the_field() -> None:
    spec = samples.full_spec()
    spec["kernelModule"]["kernelMappings"][1]["regexp"] = "(unclosed"
    spec["kernelModule"]["kernelMappings"][1]["containerImage"] = "reg.example.com/xe"
    errors = validate(samples.driver(spec=spec), samples.NAMESPACE)
    assert [e.field for e in errors] == [
        "spec.kernelModule.kernelMappings[1].regexp",
        "spec.kernelModule.kernelMappings[1].containerImage",
    ]


def test_namespace_plus_module_name_over_40_characters() -> None:
    # "gpuctl-system" (13) + "<name>-gpu": a 23-character name makes 40, one more is too long
    # for KMM v2.6.0's webhook (main's allows 41).
    assert validate(samples.driver(name="a" * 23), "gpuctl-system") == []
    errors = validate(samples.driver(name="a" * 24), "gpuctl-system")
    assert errors == [
        FieldError(
            "metadata.name",
            "namespace 'gpuctl-system' + Module name '" + "a" * 24 + "-gpu' is 41 characters; "
            "KMM allows at most 40 (shorten the GPUDriver's name)",
        )
    ]


def test_a_dot_in_the_name_is_refused_because_kmm_splits_its_version_label_at_dots() -> None:
    (error,) = validate(samples.driver(name="xe.v2"), "gpuctl-system")
    assert error.field == "metadata.name"
    assert "Module name 'xe.v2-gpu' has a dot" in error.message
    assert "kmm.node.kubernetes.io/version-module.gpuctl-system.xe.v2-gpu" in error.message


def test_schema_problems_are_reported_too() -> None:
    spec = samples.minimal_spec()
    spec["kernelModule"]["firmwarePath"] = 5
    errors = validate(samples.driver(spec=spec), samples.NAMESPACE)
    assert [e.field for e in errors] == ["spec.kernelModule.firmwarePath"]


def test_a_field_of_a_newer_crd_is_no_schema_problem() -> None:
    """A stored spec from a newer CRD (unknown_fields.py): what is known is still checked."""
    spec = samples.minimal_spec()
    spec["kernelModule"]["kernelMappings"][0]["unknownField"] = 1
    assert validate(samples.driver(spec=spec), samples.NAMESPACE) == []
    spec["kernelModule"]["firmwarePath"] = 5
    errors = validate(samples.driver(spec=spec), samples.NAMESPACE)
    assert [e.field for e in errors] == ["spec.kernelModule.firmwarePath"]


def test_field_error_reads_as_field_then_message() -> None:
    assert str(FieldError("spec.x", "bad")) == "spec.x: bad"


@pytest.mark.parametrize("version", ["v7.1.4.6_260728.7", "1", "a" * 54, "2.0-rc1"])
def test_versions_that_fit_a_label_value_are_accepted(version: str) -> None:
    spec = samples.minimal_spec()
    spec["kernelModule"]["version"] = version
    assert validate(samples.driver(spec=spec), samples.NAMESPACE) == []


@pytest.mark.parametrize("version", ["-v1", "v 1", "v1/2", "ü1", ".1"])
def test_versions_that_are_no_label_value_are_refused(version: str) -> None:
    spec = samples.minimal_spec()
    spec["kernelModule"]["version"] = version
    errors = validate(samples.driver(spec=spec), samples.NAMESPACE)
    assert [str(e) for e in errors] == [f"spec.kernelModule.version: {VERSION_MESSAGE}"]


def test_a_version_over_54_characters_is_refused() -> None:
    spec = samples.minimal_spec()
    spec["kernelModule"]["version"] = "a" * 55
    errors = validate(samples.driver(spec=spec), samples.NAMESPACE)
    assert [e.field for e in errors] == ["spec.kernelModule.version"]


def test_parameters_name_value_or_name() -> None:
    spec = samples.minimal_spec()
    spec["kernelModule"]["parameters"] = ["max_vfs=7", "force_probe=*", "debug", "a-b=x,y", "e="]
    assert validate(samples.driver(spec=spec), samples.NAMESPACE) == []
    spec["kernelModule"]["parameters"] = ["ok=1", "two words=1", "x=a b", "n=\n", "=v"]
    errors = validate(samples.driver(spec=spec), samples.NAMESPACE)
    assert [e.field for e in errors] == [f"spec.kernelModule.parameters[{i}]" for i in (1, 2, 3, 4)]
    assert str(errors[0]) == (
        "spec.kernelModule.parameters[1]: parameter 'two words=1': " + PARAMETER_MESSAGE
    )


@pytest.mark.parametrize("label", ["gpuctl.dev/driver-state", "gpuctl.dev/driver-target"])
def test_a_node_selector_on_a_label_gpuctl_writes_is_refused(label: str) -> None:
    spec = samples.minimal_spec()
    spec["nodeSelector"] = {label: "Done", "pool": "gpu"}
    errors = validate(samples.driver("gpu", spec), samples.NAMESPACE)
    assert [e.field for e in errors] == [f"spec.nodeSelector[{label!r}]"]
    assert "gpuctl writes this label itself" in errors[0].message


def test_a_node_selector_on_the_admins_labels_is_accepted() -> None:
    spec = samples.minimal_spec()
    spec["nodeSelector"] = {"pool": "gpu", "gpuctl.dev/rollout": "skip"}
    assert validate(samples.driver("gpu", spec), samples.NAMESPACE) == []


SIGN = {
    "keySecret": {"name": "mok-key"},
    "certSecret": {"name": "mok-cert"},
    "filesToSign": ["/opt/lib/modules/$KERNEL_FULL_VERSION/updates/xe.ko"],
}


def _signed(**changes: Any) -> dict[str, Any]:
    spec = samples.full_spec()
    spec["kernelModule"]["sign"] = {**SIGN, **changes}
    return spec


def test_a_sign_without_its_secrets_is_refused_naming_the_field() -> None:
    spec = _signed()
    del spec["kernelModule"]["sign"]["keySecret"]
    errors = validate(samples.driver(spec=spec), samples.NAMESPACE)
    assert "spec.kernelModule.sign.keySecret" in [e.field for e in errors]


def test_files_to_sign_must_be_under_kmms_dir_name() -> None:
    spec = _signed(filesToSign=["/lib/modules/xe.ko"], unsignedImage="reg.example.com/x:1")
    errors = validate(samples.driver(spec=spec), samples.NAMESPACE)
    assert [str(e) for e in errors if "filesToSign" in e.field] == [
        f"spec.kernelModule.sign.filesToSign[0]: {model.SIGNED_FILES_MESSAGE}"
    ]


def test_a_signed_mapping_without_a_build_needs_an_unsigned_image() -> None:
    spec = _signed()  # the full spec's mapping 0 builds, mapping 1 does not
    errors = validate(samples.driver(spec=spec), samples.NAMESPACE)
    assert [str(e) for e in errors] == [
        f"spec.kernelModule.kernelMappings[1].sign: {model.UNSIGNED_IMAGE_MESSAGE}"
    ]
    spec["kernelModule"]["kernelMappings"][1]["sign"] = {
        **SIGN,
        "unsignedImage": "reg.example.com/xe-unsigned:v7-$KERNEL_FULL_VERSION",
    }
    assert validate(samples.driver(spec=spec), samples.NAMESPACE) == []
    spec["kernelModule"]["kernelMappings"][1]["sign"]["unsignedImage"] = "reg.example.com/x"
    [error] = validate(samples.driver(spec=spec), samples.NAMESPACE)
    assert error.field == "spec.kernelModule.kernelMappings[1].sign.unsignedImage"
