"""`gpuctl preflight`'s verdict (gpuctl/cli/preflight_verdict.py): the mapping KMM would pick,
the image KMM found, how the modules get signed, and the exit code scripts read."""

from __future__ import annotations

from typing import Any

from gpuctl.cli.preflight_verdict import ImageCheck, Outcome, exit_code, render, verdict

SIGN = {"keySecret": {"name": "mok-key"}, "certSecret": {"name": "c"}, "filesToSign": ["/opt/x"]}
FOUND = ImageCheck(True, "KMM: verified image exists")
MISSING = ImageCheck(False, "ImagePullBackOff: not found")
UNASKED = ImageCheck(None, "KMM does not serve PreflightValidation v1beta2 here")


def driver(**kernel_module: Any) -> dict[str, Any]:
    mappings = [
        {"regexp": "^6\\.17\\.", "containerImage": "r.example.com/xe:v1-$KERNEL_FULL_VERSION"},
    ]
    return {
        "metadata": {"name": "gpu"},
        "spec": {"kernelModule": {"kernelMappings": mappings, **kernel_module}},
    }


def test_a_kernel_no_mapping_serves_fails_whatever_kmm_says() -> None:
    one = verdict(driver(), "6.8.0-60-generic", FOUND)
    assert one.outcome is Outcome.FAIL
    assert (
        one.image_check.words
        == "no kernel mapping matches 6.8.0-60-generic: KMM loads nothing there"
    )
    assert one.mapping == ""


def test_the_image_is_the_mappings_with_the_kernel_filled_in_and_kmm_decides() -> None:
    one = verdict(driver(), "6.17.0-9-generic", FOUND)
    assert (one.outcome, one.image) == (Outcome.PASS, "r.example.com/xe:v1-6.17.0-9-generic")
    assert verdict(driver(), "6.17.0-9-generic", MISSING).outcome is Outcome.FAIL
    assert verdict(driver(), "6.17.0-9-generic", UNASKED).outcome is Outcome.UNKNOWN


def test_signing_is_said_not_failed() -> None:
    assert verdict(driver(sign=SIGN), "6.17.0-9-generic", FOUND).signing == (
        "signed by KMM with the key in Secret mok-key"
    )
    unsigned = verdict(driver(), "6.17.0-9-generic", FOUND)
    assert unsigned.signing.startswith("unsigned: a node that enforces module signatures")
    assert unsigned.outcome is Outcome.PASS
    trusted = driver()
    trusted["spec"]["rollout"] = {"trustImageSignatures": True}
    assert verdict(trusted, "6.17.0-9-generic", FOUND).signing.startswith("signed outside")


def test_exit_codes_fail_first_then_unknown() -> None:
    passed = verdict(driver(), "6.17.0-9-generic", FOUND)
    failed = verdict(driver(), "6.17.0-9-generic", MISSING)
    unknown = verdict(driver(), "6.17.0-9-generic", UNASKED)
    assert exit_code([passed]) == 0
    assert exit_code([passed, unknown]) == 3
    assert exit_code([unknown, failed]) == 1
    assert exit_code([]) == 0


def test_the_table_and_json_name_each_fact() -> None:
    text = render([verdict(driver(), "6.17.0-9-generic", MISSING)])
    assert text.splitlines() == [
        "GPUDriver gpu, kernel 6.17.0-9-generic: FAIL",
        "  mapping: ^6\\.17\\.",
        "  image:   r.example.com/xe:v1-6.17.0-9-generic",
        "  found:   ImagePullBackOff: not found",
        "  signing: unsigned: a node that enforces module signatures (Secure Boot) will refuse it",
    ]
    assert verdict(driver(), "6.17.0-9-generic", UNASKED).as_json()["imageExists"] is None
    assert render([]) == "no GPUDriver with a kernelModule\n"
