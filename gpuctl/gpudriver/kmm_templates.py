"""KMM's template variables in a kernel mapping's image, filled in exactly as KMM fills them.

A kernel mapping's `containerImage` is usually a template (`reg/xe:v7-$KERNEL_FULL_VERSION`).
KMM fills it in per node before it looks the image up (KMM v2.6.0
internal/module/kernelmapper.go `replaceTemplates`): its ModuleImagesConfig, its pull and
worker Pods and its NodeModulesConfig all carry the filled-in name, never the template. So
every comparison gpuctl makes with what KMM reports (the rollout's image gate, `gpuctl
preflight`, `gpuctl nodes --kernel-check`, `gpuctl rollout plan`) compares the filled-in name,
made here, in one place.

What KMM does, as its source has it:

- the kernel is first normalized (internal/kernel/kernel.go `NormalizeVersion`): every
  character but ASCII letters, digits, `-`, `.` and `_` becomes `_`;
- the normalized kernel is split at `.`, `,` and `-` (internal/utils/replaceStrings.go
  `KernelComponentsAsEnvVars`; a `,` is already a `_` by then); fewer than three parts is an
  error (KMM maps no image);
- the variables: `KERNEL_FULL_VERSION` and `KERNEL_VERSION` (the normalized kernel),
  `KERNEL_XYZ` (the first three parts joined by `.`), `KERNEL_X`, `KERNEL_Y`, `KERNEL_Z`,
  `MOD_NAME` (the Module's name, `<gpudriver>-gpu`) and `MOD_NAMESPACE` (its namespace);
- they are substituted by github.com/a8m/envsubst v1.4.2 without restrictions: `$NAME` and
  `${NAME}`, a name being letters, digits and `_` (a lone `$_` is text); an unset name is
  empty; `$$` is one `$`; `${NAME:-word}` and `${NAME:=word}` give word when NAME is empty,
  `${NAME-word}` and `${NAME=word}` when it is unset, `${NAME+word}` and `${NAME:+word}` when
  it is set; a `${` never closed (or closed after a line break) is an error.

tests/gpudriver/test_kmm_templates.py holds each of these rules; every rollout test on KMM's
own operator maps its images with `$KERNEL_FULL_VERSION` (testbed/rollout_live/rig.py).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

# Every variable KMM defines for a kernel mapping's containerImage.
KERNEL_VARIABLES = (
    "KERNEL_FULL_VERSION",
    "KERNEL_VERSION",
    "KERNEL_XYZ",
    "KERNEL_X",
    "KERNEL_Y",
    "KERNEL_Z",
)
MODULE_VARIABLES = ("MOD_NAME", "MOD_NAMESPACE")

_NOT_KERNEL_CHARACTER = re.compile(r"[^A-Za-z0-9._-]")
_KERNEL_SEPARATOR = re.compile(r"[.,-]")
_OPERATORS = (":-", ":=", ":+", "-", "=", "+")


class TemplateError(ValueError):
    """KMM would refuse to fill this template in (and so map no image to the node)."""


@dataclass(frozen=True)
class ModuleOf:
    """The KMM Module whose `MOD_NAME` and `MOD_NAMESPACE` a template names."""

    name: str
    namespace: str


def normalized_kernel(kernel: str) -> str:
    """The kernel release as KMM writes it into names and labels."""
    return _NOT_KERNEL_CHARACTER.sub("_", kernel)


def template_values(kernel: str, module: ModuleOf) -> dict[str, str]:
    """KMM's variables for `kernel` on `module`; TemplateError for a kernel KMM refuses."""
    normalized = normalized_kernel(kernel)
    parts = _KERNEL_SEPARATOR.split(normalized)
    if len(parts) < 3:
        raise TemplateError(
            f"invalid kernel version {normalized}: expected at least three components "
            "(major.minor.patch)"
        )
    return {
        "KERNEL_FULL_VERSION": normalized,
        "KERNEL_VERSION": normalized,
        "KERNEL_XYZ": ".".join(parts[:3]),
        "KERNEL_X": parts[0],
        "KERNEL_Y": parts[1],
        "KERNEL_Z": parts[2],
        "MOD_NAME": module.name,
        "MOD_NAMESPACE": module.namespace,
    }


def kmm_image(template: str, kernel: str, module: ModuleOf) -> str:
    """The image KMM looks up for a node running `kernel`; TemplateError where KMM fails."""
    return fill(template, template_values(kernel, module))


def fill(text: str, values: Mapping[str, str]) -> str:
    """`text` with every variable substituted from `values` (unset: empty), as envsubst does."""
    out: list[str] = []
    at = 0
    while at < len(text):
        dollar = text.find("$", at)
        if dollar < 0:
            out.append(text[at:])
            break
        out.append(text[at:dollar])
        piece, at = _after_dollar(text, dollar + 1, values)
        out.append(piece)
    return "".join(out)


def _is_name_character(character: str) -> bool:
    """Go's unicode.IsLetter or unicode.IsDigit (category Nd), or `_`."""
    return character == "_" or character.isalpha() or unicodedata.category(character) == "Nd"


def _name_end(text: str, at: int) -> int:
    end = at
    while end < len(text) and _is_name_character(text[end]):
        end += 1
    return end


def _after_dollar(text: str, at: int, values: Mapping[str, str]) -> tuple[str, int]:
    """What a `$` ending just before `at` stands for, and where the text goes on."""
    following = text[at : at + 1]
    if following == "$":
        return "$", at + 1
    if following == "{":
        return _braced(text, at + 1, values)
    end = _name_end(text, at)
    if end == at:
        return "$", at
    name = text[at:end]
    if name == "_":
        return "$_", end
    return values.get(name, ""), end


def _braced(text: str, at: int, values: Mapping[str, str]) -> tuple[str, int]:
    """`${...}` starting at `at` (just after the brace)."""
    close = _closing_brace(text, at)
    end = _name_end(text, at)
    if end == at or text[at:end] == "_":
        return "${", at  # not a variable: what follows is read as text
    inside = text[end:close]
    operator = next((op for op in _OPERATORS if inside.startswith(op)), "")
    word = inside[len(operator) :]
    return _substituted(text[at:end], operator, word, values), close + 1


def _closing_brace(text: str, at: int) -> int:
    for index in range(at, len(text)):
        if text[index] == "}":
            return index
        if text[index] in "\r\n":
            break
    raise TemplateError(f"failed to substitute {text!r}: closing brace expected")


def _substituted(name: str, operator: str, word: str, values: Mapping[str, str]) -> str:
    """`${name<operator><word>}`; without a word the operator changes nothing."""
    value = values.get(name)
    if not operator or not word:
        return value or ""
    if operator in (":-", ":="):
        return value or fill(word, values)
    if operator in ("-", "="):
        return fill(word, values) if value is None else value
    return "" if value is None else fill(word, values)
