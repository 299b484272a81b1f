"""KMM's template variables filled in as KMM fills them (gpuctl.gpudriver.kmm_templates).

Each expectation is what KMM v2.6.0 (and main de3f8c9, unchanged there) produces:
internal/module/kernelmapper.go `replaceTemplates` over internal/kernel/kernel.go
`NormalizeVersion` and internal/utils/replaceStrings.go `KernelComponentsAsEnvVars`, the
substitution by github.com/a8m/envsubst v1.4.2's parse package (lex.go, parse.go, node.go).
"""

from __future__ import annotations

import pytest

from gpuctl.gpudriver.kmm_templates import (
    KERNEL_VARIABLES,
    MODULE_VARIABLES,
    ModuleOf,
    TemplateError,
    fill,
    kmm_image,
    normalized_kernel,
    template_values,
)
from gpuctl.gpudriver.validation import image_problem

MODULE = ModuleOf("xe-driver-gpu", "gpuctl-system")
UBUNTU = "6.8.0-60-generic"


@pytest.mark.parametrize(
    ("template", "image"),
    [
        ("r/xe:v7.1.4.6-$KERNEL_FULL_VERSION", "r/xe:v7.1.4.6-6.8.0-60-generic"),
        ("r/xe:v7.1.4.6-${KERNEL_FULL_VERSION}", "r/xe:v7.1.4.6-6.8.0-60-generic"),
        ("r/xe:$KERNEL_VERSION", "r/xe:6.8.0-60-generic"),
        ("r/xe:${KERNEL_XYZ}", "r/xe:6.8.0"),
        ("r/xe:$KERNEL_X.$KERNEL_Y.${KERNEL_Z}-x", "r/xe:6.8.0-x"),
        ("r/$MOD_NAME:${MOD_NAMESPACE}", "r/xe-driver-gpu:gpuctl-system"),
        ("r/xe:v7", "r/xe:v7"),
    ],
)
def test_every_variable_kmm_defines_with_and_without_braces(template: str, image: str) -> None:
    assert kmm_image(template, UBUNTU, MODULE) == image


def test_the_variables_are_exactly_kmms() -> None:
    values = template_values(UBUNTU, MODULE)
    assert set(values) == set(KERNEL_VARIABLES) | set(MODULE_VARIABLES)


@pytest.mark.parametrize(
    ("kernel", "normalized"),
    [
        ("6.8.0-60-generic", "6.8.0-60-generic"),
        ("6.8.0-60-generic+", "6.8.0-60-generic_"),  # a locally built kernel (CONFIG_LOCALVERSION)
        ("5.14.0-427.13.1.el9_4.x86_64", "5.14.0-427.13.1.el9_4.x86_64"),
        ("6.1.0 rt~1", "6.1.0_rt_1"),
    ],
)
def test_the_kernel_is_normalized_first(kernel: str, normalized: str) -> None:
    assert normalized_kernel(kernel) == normalized
    assert kmm_image("r/xe:$KERNEL_FULL_VERSION", kernel, MODULE) == f"r/xe:{normalized}"


def test_kernel_parts_split_after_normalizing() -> None:
    """KMM splits at `.`, `,` and `-`, but only after normalizing, which made `,` a `_`."""
    values = template_values("5.14,0-427.el9", MODULE)
    assert (values["KERNEL_X"], values["KERNEL_Y"], values["KERNEL_Z"]) == ("5", "14_0", "427")
    assert values["KERNEL_XYZ"] == "5.14_0.427"


def test_a_kernel_with_fewer_than_three_parts_is_refused_as_kmm_refuses_it() -> None:
    with pytest.raises(TemplateError, match="at least three components"):
        kmm_image("r/xe:$KERNEL_FULL_VERSION", "6.8", MODULE)


@pytest.mark.parametrize(
    ("text", "filled"),
    [
        ("$UNSET", ""),  # envsubst without restrictions: an unset name is empty
        ("a$$b", "a$b"),
        ("$_", "$_"),
        ("$_X", ""),
        ("x$", "x$"),
        ("$-x", "$-x"),
        ("${}", "${}"),
        ("${-x}", "${-x}"),
        ("${A:-word}", "a"),
        ("${UNSET:-word}", "word"),
        ("${EMPTY:-word}", "word"),
        ("${EMPTY-word}", ""),
        ("${UNSET-word}", "word"),
        ("${UNSET=word}", "word"),
        ("${UNSET:=word}", "word"),
        ("${A+word}", "word"),
        ("${UNSET+word}", ""),
        ("${A:+word}", "word"),
        ("${A+}", "a"),  # an operator without a word changes nothing
        ("${UNSET:-$A.x}", "a.x"),
        ("${A.x}", "a"),  # what follows the name without an operator is dropped
    ],
)
def test_envsubst_forms(text: str, filled: str) -> None:
    assert fill(text, {"A": "a", "EMPTY": ""}) == filled


@pytest.mark.parametrize("text", ["r/xe:${KERNEL_FULL_VERSION", "${A\n}", "${"])
def test_an_unclosed_brace_is_an_error(text: str) -> None:
    with pytest.raises(TemplateError, match="closing brace expected"):
        fill(text, {"A": "a"})


def test_validation_fills_in_as_kmm_does() -> None:
    assert image_problem("r/xe:v7-$KERNEL_XYZ-${MOD_NAME}") is None
    unclosed = image_problem("r/xe:v7-${KERNEL_FULL_VERSION")
    assert "never closed" in str(unclosed)
    # A name KMM does not define is empty in KMM: the tag is gone.
    unknown = image_problem("r/xe:$KERNEL")
    assert "invalid tag" in str(unknown)
