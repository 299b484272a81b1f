"""Installs the CRDs the project runs against and waits until the API server serves them.

- KMM's CRDs from KMM's own source, as ``hack/kmm/ensure`` leaves them beside its build
  (``testbed.harness.kmm_build``); they are never copied into the repository.
- Every ``*.yaml`` under ``charts/gpuctl/crds/`` (the project's own CRDs), when that folder exists.

Responses are read as raw JSON: the kubernetes client's CRD model rejects some valid statuses.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

SERVED_TIMEOUT_SECONDS = 60.0
POLL_SECONDS = 0.1
HTTP_CONFLICT = 409
HTTP_NOT_FOUND = 404


class CRDError(RuntimeError):
    """A CRD file is missing, or the API server does not serve a CRD in time."""


def project_crd_paths(repo_root: Path) -> list[Path]:
    """The project's own CRDs, ``charts/gpuctl/crds/*.yaml``, if that folder exists."""
    folder = repo_root / "charts" / "gpuctl" / "crds"
    return sorted(folder.glob("*.yaml")) if folder.is_dir() else []


def crd_documents(paths: list[Path]) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition document in ``paths``."""
    documents: list[dict[str, Any]] = []
    for path in paths:
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                documents.append(document)
    return documents


def _read_crd(api: Any, name: str) -> dict[str, Any]:
    response = api.read_custom_resource_definition(name, _preload_content=False)
    result: dict[str, Any] = json.loads(response.data)
    return result


def _apply(api: Any, document: dict[str, Any]) -> None:
    try:
        api.create_custom_resource_definition(document, _preload_content=False)
    except k8s.ApiException as error:
        if error.status != HTTP_CONFLICT:
            raise
        current = _read_crd(api, document["metadata"]["name"])
        replacement = json.loads(json.dumps(document))
        replacement["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        api.replace_custom_resource_definition(
            document["metadata"]["name"], replacement, _preload_content=False
        )


def _established(crd: dict[str, Any]) -> bool:
    conditions = crd.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def _served(api_client: Any, document: dict[str, Any]) -> bool:
    group = document["spec"]["group"]
    plural = document["spec"]["names"]["plural"]
    custom = k8s.CustomObjectsApi(api_client)
    for version in document["spec"]["versions"]:
        if not version.get("served", True):
            continue
        try:
            custom.list_cluster_custom_object(
                group, version["name"], plural, limit=1, _preload_content=False
            )
        except k8s.ApiException as error:
            if error.status == HTTP_NOT_FOUND:
                return False
            raise
    return True


def install_crds(
    api_client: Any,
    paths: list[Path],
    timeout_seconds: float = SERVED_TIMEOUT_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> list[str]:
    """Creates (or replaces) every CRD in ``paths``; returns their names once all are served."""
    api = k8s.ApiextensionsV1Api(api_client)
    documents = crd_documents(paths)
    for document in documents:
        _apply(api, document)
    deadline = clock() + timeout_seconds
    for document in documents:
        name = document["metadata"]["name"]
        while not (_established(_read_crd(api, name)) and _served(api_client, document)):
            if clock() > deadline:
                raise CRDError(f"CRD {name} not established and served after {timeout_seconds}s")
            time.sleep(POLL_SECONDS)
    return [document["metadata"]["name"] for document in documents]
