"""-o of API objects and documents: json|yaml a List as kubectl prints it, the objects
untouched; name; jsonpath= and custom-columns= over the same document; the flag's words."""

from __future__ import annotations

import argparse
import json

import pytest
import yaml

from gpuctl.cli.object_output import OutputFormat, render_document, render_objects

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


def test_jsonpath_and_custom_columns_read_the_same_document_as_json() -> None:
    listed = render_objects("gpunode.gpuctl.dev", NODES, "jsonpath={.items[*].metadata.name}")
    assert listed == "gpu-1 gpu-2"
    table = render_objects("gpunode.gpuctl.dev", NODES, "custom-columns=NODE:.metadata.name,X:.x")
    assert table == "NODE   X\ngpu-1  <none>\ngpu-2  <none>\n"
    bare = render_objects(
        "gpunode.gpuctl.dev", NODES, "custom-columns=NODE:.metadata.name", headers=False
    )
    assert bare == "gpu-1\ngpu-2\n"
    # One object (rollout status) is one row; a plain list (history) a row per member.
    assert render_document(NODES[0], "custom-columns=N:.kind") == "N\nGPUNode\n"
    assert render_document([{"r": 1}, {"r": 2}], "custom-columns=R:.r") == "R\n1\n2\n"


def test_the_output_flag_takes_kubectls_vocabulary_and_refuses_the_rest() -> None:
    parse = OutputFormat(("table", "json", "yaml"))
    assert parse("json") == "json"
    assert parse("text") == "table"  # the older name rollout status and version took
    assert parse("jsonpath={.a}") == "jsonpath={.a}"
    assert parse("custom-columns=A:.a") == "custom-columns=A:.a"
    with pytest.raises(argparse.ArgumentTypeError, match="'wide' is not an output format"):
        parse("wide")
    with pytest.raises(argparse.ArgumentTypeError, match="is not closed"):
        parse("jsonpath={.a")
    with pytest.raises(argparse.ArgumentTypeError, match="is not NAME:PATH"):
        parse("custom-columns=.metadata.name")
