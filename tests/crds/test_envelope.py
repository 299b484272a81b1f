"""The CRD envelope: names derived from kind, plural and group; schema and columns in place."""

from __future__ import annotations

from gpuctl.crds.envelope import custom_resource_definition

SPEC = {"type": "object", "properties": {"a": {"type": "string"}}}
STATUS = {"type": "object"}
COLUMNS = [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]


def test_envelope() -> None:
    crd = custom_resource_definition(
        group="example.dev",
        version="v1",
        kind="Widget",
        plural="widgets",
        singular="widget",
        short_names=("wd",),
        description="A widget.",
        spec=SPEC,
        status=STATUS,
        printer_columns=COLUMNS,
    )
    assert crd["metadata"] == {"name": "widgets.example.dev"}
    assert crd["spec"]["names"] == {
        "kind": "Widget",
        "listKind": "WidgetList",
        "plural": "widgets",
        "singular": "widget",
        "shortNames": ["wd"],
    }
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    assert version["subresources"] == {"status": {}}
    assert version["additionalPrinterColumns"] == COLUMNS
    root = version["schema"]["openAPIV3Schema"]
    assert root["description"] == "A widget."
    assert root["properties"]["spec"] is SPEC
    assert root["properties"]["status"] is STATUS
