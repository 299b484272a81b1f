"""bench/request_kinds.py: the resource a REST path names, as the benches count requests."""

from __future__ import annotations

import pytest

from bench.request_kinds import resource_kind


@pytest.mark.parametrize(
    ("resource_path", "kind"),
    [
        ("/api/v1/nodes/n1", "nodes"),
        ("/api/v1/pods?labelSelector=a%3Db", "pods"),
        ("/api/v1/namespaces/ns/pods", "pods"),
        ("/api/v1/namespaces/ns/pods/p/eviction", "pods/eviction"),
        ("/api/v1/namespaces/ns", "namespaces"),
        ("/apis/gpuctl.dev/v1alpha1/gpudrivers/g/status", "gpudrivers/status"),
        ("/apis/kmm.sigs.x-k8s.io/v1beta1/namespaces/ns/modules/m", "modules"),
        ("/apis/events.k8s.io/v1/namespaces/default/events", "events"),
        ("/api/v1", "other"),
    ],
)
def test_a_path_names_its_resource_and_subresource(resource_path: str, kind: str) -> None:
    assert resource_kind(resource_path) == kind
