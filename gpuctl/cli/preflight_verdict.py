"""`gpuctl preflight`'s verdict for one GPUDriver and one kernel (pure).

Before nodes reboot into a new kernel: would the driver load there? From facts, each with its
source: the kernel mapping KMM would pick (gpuctl.gpudriver.targeting: the first whose regexp
matches, Go's RE2 semantics), the image KMM finds for it (KMM's own PreflightValidation, which
pulls it the way a node would; `ImageCheck`), and whether KMM signs it for that kernel
(gpuctl.rollout.step.preflight.signed_for) or the admin says its images are signed. A missing
mapping or image fails; an image KMM could not be asked about is unknown, never a pass.
Signing is reported, not failed: only a node that enforces signatures needs it, and the
rollout's own preflight blocks such a node (docs/secure-boot.md).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.cli.kmm_touch import module_ref
from gpuctl.gpudriver.kmm_templates import ModuleOf, TemplateError, kmm_image
from gpuctl.gpudriver.module_spec import module_name
from gpuctl.gpudriver.targeting import mapping_for
from gpuctl.rollout.step.preflight import signed_for


class Outcome(enum.StrEnum):
    PASS = "pass"  # noqa: S105 (an outcome, not a password)
    FAIL = "fail"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ImageCheck:
    """What KMM said of the mapping's image for the kernel: `exists` True/False, or None
    (not asked, not answered) with why."""

    exists: bool | None
    words: str


@dataclass(frozen=True)
class KernelVerdict:
    driver: str
    kernel: str
    mapping: str  # the matching regexp; "" when none matches
    image: str  # the mapping's image for this kernel; "" without a mapping
    image_check: ImageCheck
    signing: str  # how its modules get signed, in words

    @property
    def outcome(self) -> Outcome:
        if not self.mapping or self.image_check.exists is False:
            return Outcome.FAIL
        if self.image_check.exists is None:
            return Outcome.UNKNOWN
        return Outcome.PASS

    def as_json(self) -> dict[str, Any]:
        return {
            "gpudriver": self.driver,
            "kernel": self.kernel,
            "outcome": self.outcome.value,
            "mapping": self.mapping or None,
            "image": self.image or None,
            "imageExists": self.image_check.exists,
            "imageCheck": self.image_check.words,
            "signing": self.signing,
        }


def image_for(driver: Mapping[str, Any], mapping: Mapping[str, Any], kernel: str) -> str:
    """The image KMM looks up for `kernel`: the mapping's, its template variables filled in
    as KMM fills them (gpuctl.gpudriver.kmm_templates) for the GPUDriver's Module (its
    `status.module`; before there is one, `$MOD_NAMESPACE` stays as written)."""
    image = str(mapping.get("containerImage") or "")
    ref = module_ref(driver)
    if ref:
        module = ModuleOf(name=ref[1], namespace=ref[0])
    else:
        module = ModuleOf(module_name(str(driver["metadata"]["name"])), "${MOD_NAMESPACE}")
    try:
        return kmm_image(image, kernel, module)
    except TemplateError as error:
        return f"{image} (KMM cannot fill it in: {error})"


def signing_words(spec: Mapping[str, Any], kernel: str) -> str:
    kernel_module = spec.get("kernelModule") or {}
    if signed_for(kernel_module, kernel):
        sign = kernel_module.get("sign") or {}
        mapping = mapping_for(kernel, kernel_module.get("kernelMappings") or []) or {}
        key = (mapping.get("sign") or sign).get("keySecret", {}).get("name", "?")
        return f"signed by KMM with the key in Secret {key}"
    if (spec.get("rollout") or {}).get("trustImageSignatures"):
        return "signed outside the cluster (rollout.trustImageSignatures)"
    return "unsigned: a node that enforces module signatures (Secure Boot) will refuse it"


def verdict(driver: Mapping[str, Any], kernel: str, image_check: ImageCheck) -> KernelVerdict:
    spec = driver.get("spec") or {}
    kernel_module = spec.get("kernelModule") or {}
    mapping = mapping_for(kernel, kernel_module.get("kernelMappings") or [])
    name = str(driver["metadata"]["name"])
    if mapping is None:
        check = ImageCheck(False, f"no kernel mapping matches {kernel}: KMM loads nothing there")
        return KernelVerdict(name, kernel, "", "", check, signing_words(spec, kernel))
    return KernelVerdict(
        name,
        kernel,
        str(mapping.get("regexp") or mapping.get("literal") or ""),
        image_for(driver, mapping, kernel),
        image_check,
        signing_words(spec, kernel),
    )


def render(verdicts: list[KernelVerdict]) -> str:
    lines = []
    for one in verdicts:
        lines.append(f"GPUDriver {one.driver}, kernel {one.kernel}: {one.outcome.value.upper()}")
        lines.append(f"  mapping: {one.mapping or 'none matches'}")
        if one.image:
            lines.append(f"  image:   {one.image}")
        lines.append(f"  found:   {one.image_check.words}")
        lines.append(f"  signing: {one.signing}")
    return "\n".join(lines) + "\n" if lines else "no GPUDriver with a kernelModule\n"


def exit_code(verdicts: list[KernelVerdict]) -> int:
    """0 every GPUDriver passes; 1 one fails; 3 none fails and one is unknown."""
    outcomes = {one.outcome for one in verdicts}
    if Outcome.FAIL in outcomes:
        return 1
    return 3 if Outcome.UNKNOWN in outcomes else 0
