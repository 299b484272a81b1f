"""-o json|yaml|name of API objects: a List as kubectl prints it, the objects untouched."""

from __future__ import annotations

import json

import yaml

from gpuctl.cli.object_output import render_document, render_objects

NODES = [
    {"apiVersion": "gpuctl.dev/v1alpha1", "kind": "GPUNode", "metadata": {"name": "gpu-1"}},
    {"apiVersion": "gpuctl.dev/v1alpha1", "kind": "GPUNode", "metadata": {"name": "gpu-2"}},
]


def test_json_and_yaml_are_a_list_of_the_objects_as_served() -> None:
    for output, parse in (("json", json.loads), ("yaml", yaml.safe_load)):
        document = parse(render_objects("gpunode.gpuctl.dev", NODES, output))
        assert document == {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": NODES}


def test_name_is_one_kind_group_slash_name_per_line() -> None:
    assert render_objects("gpunode.gpuctl.dev", NODES, "name") == (
        "gpunode.gpuctl.dev/gpu-1\ngpunode.gpuctl.dev/gpu-2\n"
    )
    assert render_objects("gpunode.gpuctl.dev", [], "name") == ""


def test_words_outside_ascii_stay_readable_in_yaml() -> None:
    assert "→" in render_document({"message": "a → b"}, "yaml")
