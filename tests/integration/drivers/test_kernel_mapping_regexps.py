"""gpuctl refuses a kernel-mapping regexp whenever KMM's own webhook does, and also where KMM
would read it otherwise than gpuctl.

KMM compiles `kernelMappings[].regexp` with Go's RE2 (internal/webhook/module.go); gpuctl
checks a GPUDriver's before it writes the Module (gpuctl/gpudriver/validation.py), so a
GPUDriver KMM would refuse is refused with the field named instead of a Module that never
lands. This runs every pattern through both - KMM's webhook server on the real API server -
and requires them to agree; and the patterns Go's RE2 accepts but Python's `re` reads
otherwise (`x{,n}`, POSIX classes, Unicode classes, ...: gpuctl could think a node is served by a
mapping KMM does not match, so a Module update is not held and KMM unloads) are accepted by
KMM and refused by gpuctl, saying why. Every verdict against Go's regexp itself, on a random
corpus too: tests/gpudriver/test_re2_against_go.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from gpuctl.gpudriver.validation import regexp_problem
from testbed.cluster_api import mapped_image
from testbed.harness.real_kmm import KMM_GROUP, KMM_VERSION, RealKmm

pytestmark = pytest.mark.integration

PATTERNS = [
    r"^.+$",
    r"^6\.8\.0-[0-9]+-generic$",
    r"^(?P<major>\d+)\.(\d+)",  # named groups: both
    r"(?i)^6\.8",  # flags: both
    r"^6\.8\z",  # RE2's end of text
    r"^6\.8(?=\.0)",  # lookahead: Python only
    r"(?<!rt)-generic$",  # lookbehind: Python only
    r"^(6)\.\1",  # backreference: Python only
    r"^6\.8\Z",  # Python's end of string: RE2 refuses \Z
    r"^6\.8(?>\.0)",  # atomic group (Python 3.11): RE2 refuses
    r"^6\.8.*+$",  # possessive quantifier (Python 3.11): RE2 refuses
    r"^6\.(?(1)8|9)",  # conditional: neither
    r"^6\.[8",  # unbalanced: neither
]
# Go's RE2 accepts each, Python's `re` reads it otherwise (or not at all).
READ_DIFFERENTLY = [
    r"^6\.8{,2}$",  # Python: 0-2 repetitions; RE2: the text "{,2}"
    r"^[[:digit:]]\.8",  # RE2: a digit; Python: one of "[:digt" then "]"
    r"^\pN\.8",  # RE2: a Unicode number; Python: refused
    r"^\Q6.8\E",  # RE2: quoted text; Python: refused
    r"^(?U)6.*",  # RE2: ungreedy; Python: refused
    r"^(?<major>\d+)",  # RE2 (Go 1.22): a named group; Python 3.11: refused
]


def module(namespace: str, name: str, pattern: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{KMM_GROUP}/{KMM_VERSION}",
        "kind": "Module",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"never": "selected"},
            "moduleLoader": {
                "container": {
                    "modprobe": {"moduleName": "xe"},
                    "kernelMappings": [{"regexp": pattern, "containerImage": mapped_image("1")}],
                }
            },
        },
    }


def kmm_accepts(kube_admin: Any, namespace: str, name: str, pattern: str) -> bool:
    try:
        k8s.CustomObjectsApi(kube_admin).create_namespaced_custom_object(
            KMM_GROUP, KMM_VERSION, namespace, "modules", module(namespace, name, pattern)
        )
    except k8s.ApiException as error:
        refusal = (error.status, str(error.body))
    else:
        return True
    assert refusal[0] in (400, 403, 422), refusal  # a webhook refusal, not another failure
    assert "admission webhook" in refusal[1], refusal
    return False


def test_gpuctl_and_kmms_webhook_agree_on_every_regexp(real_kmm: RealKmm, kube_admin: Any) -> None:
    verdicts = {
        pattern: (
            kmm_accepts(kube_admin, real_kmm.namespace, f"m{index}", pattern),
            regexp_problem(pattern) is None,
        )
        for index, pattern in enumerate(PATTERNS)
    }
    disagreements = {p: v for p, v in verdicts.items() if v[0] != v[1]}
    assert disagreements == {}, "(KMM accepts, gpuctl accepts) differ for these patterns"
    assert verdicts[r"^.+$"] == (True, True)  # the webhook was there and answered
    assert verdicts[r"^6\.8(?=\.0)"] == (False, False)


def test_kmm_accepts_what_go_and_python_read_differently_and_gpuctl_refuses_it(
    real_kmm: RealKmm, kube_admin: Any
) -> None:
    for index, pattern in enumerate(READ_DIFFERENTLY):
        assert kmm_accepts(kube_admin, real_kmm.namespace, f"d{index}", pattern), pattern
        problem = regexp_problem(pattern)
        assert problem is not None, pattern
        assert "KMM's Go RE2 and gpuctl would match different kernels" in problem
