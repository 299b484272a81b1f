"""kubectl's JSONPath dialect (gpuctl.cli.jsonpath): each template here is one the Kubernetes
documentation's JSONPath page (reference/kubectl/jsonpath) or a kubectl user writes, and its
output what `kubectl get -o jsonpath=` prints for the same data."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.cli import jsonpath

NODES: dict[str, Any] = {
    "kind": "List",
    "items": [
        {
            "metadata": {"name": "gpu-1", "labels": {"gpuctl.dev/state": "Done"}},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "Stale", "status": "False"},
                ],
                "gpus": 2,
                "connected": True,
            },
        },
        {"metadata": {"name": "gpu-2"}, "status": {"gpus": 1, "connected": False}},
    ],
}


def printed(template: str, data: Any = None) -> str:
    return jsonpath.render(jsonpath.parse(template), NODES if data is None else data)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{.kind}", "List"),
        ("{.items[*].metadata.name}", "gpu-1 gpu-2"),
        ("{.items[0].metadata.name}", "gpu-1"),
        ("{.items[-1].metadata.name}", "gpu-2"),
        ("{.items[0:1].metadata.name}", "gpu-1"),
        ("{.items[5].metadata.name}", ""),
        ("{..name}", "gpu-1 gpu-2"),
        ("{.items[0].metadata.labels.gpuctl\\.dev/state}", "Done"),
        ("{.items[0].metadata['name']}", "gpu-1"),
        ('{.items[0].status.conditions[?(@.type=="Ready")].status}', "True"),
        ("{.items[?(@.status.gpus>1)].metadata.name}", "gpu-1"),
        ("{.items[?(@.status.connected==false)].metadata.name}", "gpu-2"),
        ("{.items[?(@.metadata.labels)].metadata.name}", "gpu-1"),
        ("{.items[1].metadata}", '{"name":"gpu-2"}'),
        ("{.items[0].status.gpus}", "2"),
        ("{.items[0].status.connected}", "true"),
        ("{.items[0].missing.key}", ""),
        ("nodes: {.items[*].metadata.name}", "nodes: gpu-1 gpu-2"),
        (
            '{range .items[*]}{.metadata.name}{"\\t"}{.status.gpus}{"\\n"}{end}',
            "gpu-1\t2\ngpu-2\t1\n",
        ),
        # As kubectl's: a range over `.items` (not `.items[*]`) is one round, over the list.
        ("{range .items}[{.metadata.name}]{end}", "[]"),
        ("{'a}b'}", "a}b"),
    ],
)
def test_prints_what_kubectl_prints(template: str, expected: str) -> None:
    assert printed(template) == expected


@pytest.mark.parametrize(
    ("template", "words"),
    [
        ("{.items", "not closed"),
        ("{range .items[*]}{.metadata.name}", "has no {end}"),
        ("{end}", "closes no {range}"),
        ("{.items[x]}", "not an index, slice or filter"),
        ("{.items[?(type==1)]}", "must start with @"),
        ("{.items[?(@.a==b)]}", "not a literal"),
        ("{.items[0}", "not closed"),
        ("{.}", "a name is missing"),
    ],
)
def test_a_bad_template_is_refused_saying_why(template: str, words: str) -> None:
    with pytest.raises(jsonpath.JSONPathError, match=words.replace("{", r"\{")):
        jsonpath.parse(template)


def test_a_column_path_takes_kubectls_relaxed_forms() -> None:
    for path in (".metadata.name", "{.metadata.name}", "metadata.name", "$.metadata.name"):
        assert jsonpath.find(jsonpath.parse_path(path), NODES["items"][0]) == ["gpu-1"]
