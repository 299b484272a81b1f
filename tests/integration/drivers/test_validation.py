"""Validation: the API server refuses what the CRD's schema and CEL rules say, with their
messages; what CEL cannot check the coordinator reports as a status error and a Warning Event
naming the field, and writes no Module. The reference's webhook test scenarios.
"""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.kube.client import KubeError
from testbed.cluster_api import (
    Api,
    gpudriver,
    wait_status,
)
from testbed.harness.access import KubeCluster
from tests.support.coordinator_thread import running_coordinator

pytestmark = pytest.mark.integration


def mapping(**fields: Any) -> dict[str, Any]:
    return {"regexp": "^.+$", "containerImage": "reg.example.com/xe:1.0", **fields}


def kernel_module(**fields: Any) -> dict[str, Any]:
    return {"kernelModule": {"kernelMappings": [mapping()], **fields}}


SIGN = {"keySecret": {"name": "k"}, "certSecret": {"name": "c"}, "filesToSign": ["/opt/x.ko"]}

REJECTED = [
    ("no-mappings", {"kernelModule": {"kernelMappings": []}}, "should have at least 1 items"),
    ("no-mapping-list", {"kernelModule": {"moduleName": "xe"}}, "kernelMappings: Required value"),
    (
        "no-regexp",
        {"kernelModule": {"kernelMappings": [{"containerImage": "r.example.com/xe:1"}]}},
        "kernelMappings[0].regexp: Required value",
    ),
    (
        "no-image-no-build",
        {"kernelModule": {"kernelMappings": [{"regexp": "^.+$"}]}},
        "containerImage or build must be set",
    ),
    (
        "build-only",
        {
            "kernelModule": {
                "kernelMappings": [
                    {"regexp": "^.+$", "build": {"dockerfileConfigMap": {"name": "d"}}}
                ]
            }
        },
        "containerImage is required, also with build",
    ),
    (
        "build-no-configmap-name",
        kernel_module(kernelMappings=[mapping(build={"dockerfileConfigMap": {}})]),
        "build.dockerfileConfigMap.name: Required value",
    ),
    (
        "build-no-configmap",
        kernel_module(kernelMappings=[mapping(build={"buildArgs": []})]),
        "build.dockerfileConfigMap: Required value",
    ),
    (
        "order-too-short",
        kernel_module(modulesLoadingOrder=["xe"]),
        "modulesLoadingOrder must have at least 2 entries",
    ),
    (
        "order-wrong-first",
        kernel_module(modulesLoadingOrder=["drm_buddy", "xe"]),
        "modulesLoadingOrder must start with moduleName",
    ),
    (
        "order-custom-name",
        kernel_module(moduleName="xe_oot", modulesLoadingOrder=["xe", "drm_buddy"]),
        "modulesLoadingOrder must start with moduleName",
    ),
    (
        "order-duplicates",
        kernel_module(modulesLoadingOrder=["xe", "drm_buddy", "drm_buddy"]),
        "modulesLoadingOrder must not contain duplicates",
    ),
    (
        "tls-not-boolean",
        kernel_module(registryTLS={"insecure": "yes"}),
        "registryTLS.insecure: Invalid value",
    ),
    (
        "mapping-tls-not-boolean",
        kernel_module(kernelMappings=[mapping(registryTLS={"insecureSkipTLSVerify": "no"})]),
        "registryTLS.insecureSkipTLSVerify: Invalid value",
    ),
    (
        "version-not-a-label-value",
        kernel_module(version="v1/2"),
        "version must start with a letter or digit",
    ),
    ("version-too-long", kernel_module(version="v" * 55), "may not be more than 54"),
    (
        "parameter-with-space",
        kernel_module(parameters=["max_vfs=7", "force_probe=a b"]),
        "each parameter is name=value or name",
    ),
    (
        "sign-without-key-secret",
        kernel_module(sign={"certSecret": {"name": "c"}, "filesToSign": ["/opt/x.ko"]}),
        "sign.keySecret: Required value",
    ),
    (
        "sign-file-outside-opt",
        kernel_module(sign={**SIGN, "filesToSign": ["/lib/x.ko"], "unsignedImage": "r.io/u:1"}),
        "filesToSign must be paths in the image under /opt/",
    ),
    (
        "signed-mapping-without-build-or-unsigned-image",
        kernel_module(kernelMappings=[mapping(sign=SIGN)]),
        "needs sign.unsignedImage",
    ),
    (
        "bad-toleration-operator",
        {**kernel_module(), "tolerations": [{"key": "k", "operator": "Maybe"}]},
        "Unsupported value",
    ),
]


@pytest.mark.parametrize(("suffix", "spec", "message"), REJECTED, ids=[r[0] for r in REJECTED])
def test_api_server_rejects_with_message(
    namespace: str, api: Api, suffix: str, spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(KubeError) as refused:
        api.create_driver(gpudriver(f"{namespace}-{suffix}"[:40], namespace, spec))
    assert refused.value.status == 422
    assert message in refused.value.message


def test_valid_order_and_default_module_name_accepted(namespace: str, api: Api) -> None:
    created = api.create_driver(
        gpudriver(f"{namespace}-ok", namespace, kernel_module(modulesLoadingOrder=["xe", "drm"]))
    )
    assert created["spec"]["kernelModule"]["moduleName"] == "xe"
    assert created["spec"]["tolerateAllTaints"] is True  # the CRD's default


def test_parameters_and_a_54_character_version_accepted(namespace: str, api: Api) -> None:
    spec = kernel_module(version="v" * 54, parameters=["max_vfs=7", "force_probe=*", "debug"])
    created = api.create_driver(gpudriver(f"{namespace}-params", namespace, spec))
    assert created["spec"]["kernelModule"]["parameters"] == ["max_vfs=7", "force_probe=*", "debug"]


COORDINATOR_CHECKS = [
    (
        "re",
        kernel_module(kernelMappings=[mapping(regexp="^(6\\.8")]),
        "spec.kernelModule.kernelMappings[0].regexp: regexp '^(6\\\\.8' does not compile",
    ),
    (
        "tag",
        kernel_module(
            kernelMappings=[mapping(containerImage="reg.example.com/xe-$KERNEL_FULL_VERSION")]
        ),
        "spec.kernelModule.kernelMappings[0].containerImage: image "
        "'reg.example.com/xe-$KERNEL_FULL_VERSION' needs an explicit tag or digest",
    ),
]


@pytest.mark.parametrize(
    ("suffix", "spec", "message"), COORDINATOR_CHECKS, ids=[c[0] for c in COORDINATOR_CHECKS]
)
def test_coordinator_reports_what_cel_cannot_check(
    kube_cluster: KubeCluster,
    *,
    namespace: str,
    api: Api,
    suffix: str,
    spec: dict[str, Any],
    message: str,
) -> None:
    name = f"{namespace}-{suffix}"
    created = api.create_driver(gpudriver(name, namespace, spec))
    with running_coordinator(kube_cluster, namespace):
        status = wait_status(api, name, lambda s: bool(s.get("errors")), "reports an error")
        assert any(e.startswith(message) for e in status["errors"]), status["errors"]
        degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
        assert (degraded["status"], degraded["reason"]) == ("True", "InvalidSpec")
        warnings = [
            e
            for e in api.events_for(created["metadata"]["uid"])
            if e["type"] == "Warning" and e["reason"] == "InvalidSpec"
        ]
        assert any(e["message"].startswith(message) for e in warnings)
        assert api.get_module(namespace, f"{name}-gpu") is None


def test_coordinator_refuses_names_over_kmm_limit_or_with_a_dot(
    kube_cluster: KubeCluster, namespace: str, api: Api
) -> None:
    name = (namespace + "-" + "x" * 40)[: 41 - len(namespace) - len("-gpu")]
    assert len(namespace) + len(name) + len("-gpu") == 41
    api.create_driver(gpudriver(name, namespace, {**kernel_module(), "nodeSelector": {"x": "1"}}))
    dotted = f"{namespace}.v2"
    api.create_driver(gpudriver(dotted, namespace, {**kernel_module(), "nodeSelector": {"x": "2"}}))
    with running_coordinator(kube_cluster, namespace):
        status = wait_status(api, name, lambda s: bool(s.get("errors")), "reports an error")
        assert status["errors"][0].startswith("metadata.name: namespace")
        assert "KMM allows at most 40" in status["errors"][0]
        assert api.get_module(namespace, f"{name}-gpu") is None
        status = wait_status(api, dotted, lambda s: bool(s.get("errors")), "reports an error")
        assert status["errors"][0].startswith(
            f"metadata.name: Module name '{dotted}-gpu' has a dot"
        )
        assert api.get_module(namespace, f"{dotted}-gpu") is None
        # A shorter name in the same namespace is fine.
        short = f"{namespace}-s"
        api.create_driver(
            gpudriver(short, namespace, {**kernel_module(), "nodeSelector": {"x": "y"}})
        )
        wait_status(api, short, lambda s: s.get("kmmStatus") == "0/0", "reports 0/0")


def test_a_signed_mapping_with_an_unsigned_image_or_a_build_is_accepted(
    namespace: str, api: Api
) -> None:
    build = {"dockerfileConfigMap": {"name": "d"}}
    spec = kernel_module(
        sign={**SIGN, "unsignedImage": "r.example.com/u:1"},
        kernelMappings=[mapping(), mapping(regexp="^6", build=build, sign=SIGN)],
    )
    created = api.create_driver(gpudriver(f"{namespace}-signed", namespace, spec))
    assert created["spec"]["kernelModule"]["sign"]["keySecret"] == {"name": "k"}
