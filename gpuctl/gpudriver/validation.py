"""Checks on a GPUDriver that the CRD's schema and CEL rules cannot express.

The API server already refuses what OpenAPI and CEL can say (see
gpuctl/gpudriver/model.py). What is left is checked here, before the coordinator writes
anything, and reported as a status error and a Warning Event that name the field:

- a `regexp` that does not compile as Go's RE2, which KMM uses, or that Go and Python read
  differently (gpuctl.gpudriver.re2; checked against KMM's own webhook in
  tests/integration/drivers/test_kernel_mapping_regexps.py and against Go's regexp in
  tests/gpudriver/test_re2_against_go.py);
- a `containerImage` without an explicit tag or digest once KMM's template variables
  (`$KERNEL_FULL_VERSION`, `$MOD_NAME`, `${VAR}`) are filled in as KMM fills them
  (gpuctl.gpudriver.kmm_templates: a name KMM does not define is empty, a `${` never
  closed is an error);
- KMM's limit of 40 characters on namespace + Module name (its node label names; v2.6.0's
  webhook, main's allows 41), and no dot in the GPUDriver's name: KMM reads the namespace
  and Module back from its version label `version-module.<namespace>.<module>` by splitting
  at dots (internal/utils/kmmlabels.go), so a dotted Module name never gets its ordered load;
- `version` and `parameters` as the CEL rules have them (model.VERSION_PATTERN,
  model.PARAMETER_PATTERN), for a GPUDriver stored before those rules existed: a version that
  is not a label value would break every Node write of the rollout;
- `sign` (kernelModule.sign and each mapping's) as the CEL rules and KMM's webhook have it:
  filesToSign under KMM's dirName (/opt), an unsignedImage for a signed mapping without a
  build, and that image with an explicit tag;
- a `nodeSelector` on the labels gpuctl itself writes (names.STATE_LABEL,
  names.TARGET_LABEL): each rollout step would change which nodes are wanted (and the
  coordinator does not reconcile on its own state label's changes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pydantic

from gpuctl.common import names
from gpuctl.gpudriver import model, re2
from gpuctl.gpudriver.kmm_templates import ModuleOf, TemplateError, kmm_image
from gpuctl.gpudriver.module_spec import KMM_MAX_NAMESPACE_PLUS_NAME, module_name

# Node labels gpuctl writes: a GPUDriver cannot select its nodes by them.
GPUCTL_WRITTEN_LABELS = (names.STATE_LABEL, names.TARGET_LABEL)


@dataclass(frozen=True)
class FieldError:
    """One problem with one field of a GPUDriver."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


_DIGEST = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_REPOSITORY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")
# What KMM's template variables are filled in from to check an image: a kernel release as
# distributions write them, and a Module as the coordinator names them.
_SAMPLE_KERNEL = "6.8.0-1-generic"
_SAMPLE_MODULE = ModuleOf(module_name("xe-driver"), "gpuctl-system")


def expand_template_variables(image: str) -> str:
    """The image reference as KMM would fill it in for a sample kernel and Module;
    TemplateError where KMM could not."""
    return kmm_image(image, _SAMPLE_KERNEL, _SAMPLE_MODULE)


def _path_of(repository: str) -> str:
    """The repository path without its registry host (which may be in any case)."""
    first, slash, rest = repository.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return rest
    return repository


def _reference_problem(image: str, expanded: str) -> str | None:
    """Problems of the tag or digest part; returns None when there is one and it is well formed."""
    name, at, digest = expanded.partition("@")
    if at:
        return None if _DIGEST.match(digest) else f"image {image!r} has a malformed digest"
    last = name.rsplit("/", 1)[-1]
    repo_part, colon, tag = last.partition(":")
    if not colon:
        return (
            f"image {image!r} needs an explicit tag or digest "
            "(e.g. registry.example.com/xe:1.0-$KERNEL_FULL_VERSION)"
        )
    if not _TAG.match(tag) or not repo_part:
        return f"image {image!r} has an invalid tag {tag!r}"
    return None


def image_problem(image: str) -> str | None:
    """Why an image reference is unusable, or None. KMM needs an explicit tag or digest."""
    try:
        expanded = expand_template_variables(image)
    except TemplateError:
        return f"image {image!r} has a malformed template variable (a `${{` never closed)"
    if "$" in expanded:
        return f"image {image!r} has a malformed template variable"
    problem = _reference_problem(image, expanded)
    if problem:
        return problem
    name = expanded.partition("@")[0]
    if "@" not in expanded:
        name = name.rsplit(":", 1)[0]
    if not _REPOSITORY.match(name) or _path_of(name) != _path_of(name).lower():
        return f"image {image!r} is not a valid reference (the repository path is lowercase)"
    return None


def regexp_problem(pattern: str) -> str | None:
    """Why a kernel-version regexp would not compile in KMM, or would match other kernels in
    KMM (Go's RE2) than in gpuctl; None when both read it alike."""
    refused = re2.refusal(pattern)
    if refused:
        return f"regexp {pattern!r} uses {refused}, which KMM's RE2 refuses"
    differs = re2.divergence(pattern)
    if differs:
        return (
            f"regexp {pattern!r} uses {differs} (KMM's Go RE2 and gpuctl would match different "
            "kernels)"
        )
    try:
        re2.compiled(pattern)
    except re.error as err:
        return f"regexp {pattern!r} does not compile: {err}"
    return None


def version_problem(version: str) -> str | None:
    """Why `kernelModule.version` cannot become part of a Node label value, or None (its
    length is the schema's: model.VERSION_MAX_LENGTH)."""
    if not re.fullmatch(model.VERSION_PATTERN, version):
        return model.VERSION_MESSAGE
    return None


def parameter_problem(parameter: str) -> str | None:
    """Why one modprobe parameter is refused, or None."""
    if not re.fullmatch(model.PARAMETER_PATTERN, parameter):
        return f"parameter {parameter!r}: {model.PARAMETER_MESSAGE}"
    return None


def _kernel_module_errors(kernel_module: dict[str, Any]) -> list[FieldError]:
    errors = []
    version = kernel_module.get("version")
    if version:
        problem = version_problem(str(version))
        if problem:
            errors.append(FieldError("spec.kernelModule.version", problem))
    for i, parameter in enumerate(kernel_module.get("parameters") or []):
        problem = parameter_problem(str(parameter))
        if problem:
            errors.append(FieldError(f"spec.kernelModule.parameters[{i}]", problem))
    for i, mapping in enumerate(kernel_module.get("kernelMappings") or []):
        where = f"spec.kernelModule.kernelMappings[{i}]"
        problem = regexp_problem(str(mapping.get("regexp", "")))
        if problem:
            errors.append(FieldError(f"{where}.regexp", problem))
        image = mapping.get("containerImage")
        if image:
            problem = image_problem(str(image))
            if problem:
                errors.append(FieldError(f"{where}.containerImage", problem))
        errors.extend(_sign_errors(kernel_module.get("sign"), mapping, where))
    if kernel_module.get("sign"):
        errors.extend(_sign_section_errors(kernel_module["sign"], "spec.kernelModule.sign"))
    return errors


def _sign_section_errors(sign: dict[str, Any], where: str) -> list[FieldError]:
    """One `sign` section: its files under KMM's dirName, its unsignedImage a usable image."""
    errors = []
    for i, path in enumerate(sign.get("filesToSign") or []):
        if not str(path).startswith(model.KMM_DIR_NAME + "/"):
            errors.append(FieldError(f"{where}.filesToSign[{i}]", model.SIGNED_FILES_MESSAGE))
    image = sign.get("unsignedImage")
    if image:
        problem = image_problem(str(image))
        if problem:
            errors.append(FieldError(f"{where}.unsignedImage", problem))
    return errors


def _sign_errors(
    module_sign: dict[str, Any] | None, mapping: dict[str, Any], where: str
) -> list[FieldError]:
    """A mapping's own sign section, and whether what KMM signs for it is known: with a sign
    (its own or the module's) and no build, an unsignedImage must be given."""
    own = mapping.get("sign")
    errors = _sign_section_errors(own, f"{where}.sign") if own else []
    if not (own or module_sign) or mapping.get("build"):
        return errors
    if not any(section and section.get("unsignedImage") for section in (own, module_sign)):
        errors.append(FieldError(f"{where}.sign", model.UNSIGNED_IMAGE_MESSAGE))
    return errors


def _schema_errors(spec: dict[str, Any]) -> list[FieldError]:
    try:
        model.parse_spec(spec)
    except pydantic.ValidationError as err:
        return [
            FieldError(
                "spec." + ".".join(str(p) for p in e["loc"]),
                e["msg"],
            )
            for e in err.errors()
        ]
    return []


def validate(driver: dict[str, Any], namespace: str) -> list[FieldError]:
    """Every problem with a GPUDriver that would make its Module wrong or refused."""
    spec = driver.get("spec") or {}
    errors = _schema_errors(spec)
    for label in GPUCTL_WRITTEN_LABELS:
        if label in (spec.get("nodeSelector") or {}):
            errors.append(
                FieldError(
                    f"spec.nodeSelector[{label!r}]",
                    "gpuctl writes this label itself (rollout state and targeting); select "
                    "nodes by labels of your own",
                )
            )
    kernel_module = spec.get("kernelModule")
    if not kernel_module:
        return errors
    errors.extend(_kernel_module_errors(kernel_module))
    name = module_name(driver["metadata"]["name"])
    if "." in name:
        errors.append(
            FieldError(
                "metadata.name",
                f"Module name {name!r} has a dot: KMM splits its version label "
                f"{names.kmm_version_label(namespace, name)!r} at dots and would read another "
                "namespace and Module from it, so the node never loads (rename the GPUDriver "
                "without dots)",
            )
        )
    length = len(namespace) + len(name)
    if length > KMM_MAX_NAMESPACE_PLUS_NAME:
        errors.append(
            FieldError(
                "metadata.name",
                f"namespace {namespace!r} + Module name {name!r} is {length} characters; "
                f"KMM allows at most {KMM_MAX_NAMESPACE_PLUS_NAME} (shorten the GPUDriver's name)",
            )
        )
    return errors
