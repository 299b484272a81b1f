"""The node annotations the rollout records before it changes a node, and reads back."""

from __future__ import annotations

import pytest

from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb
from gpuctl.rollout.input.records import (
    BoundFunction,
    RecordError,
    decode_bound,
    decode_changes,
    decode_vfs,
    encode_bound,
    encode_changes,
    encode_vfs,
    merge_changes,
    reconstructed_changes,
)
from tests.support.rollout_samples import PF, disabled_vfs


def unbound(address: str, driver: str = "xe") -> agent_pb.NodeChange:
    return agent_pb.NodeChange(unbound=agent_pb.UnboundFunction(pci_address=address, driver=driver))


def test_changes_round_trip_as_proto3_json() -> None:
    changes = [disabled_vfs(PF, 4), unbound("0000:04:00.0")]
    text = encode_changes(changes)
    assert '"disabledVfs"' in text
    assert '"pciAddress":"0000:03:00.0"' in text
    assert decode_changes(text) == changes


def test_merge_keeps_the_first_record_of_each_function() -> None:
    first = [disabled_vfs(PF, 4)]
    again = [disabled_vfs(PF, 0), unbound("0000:04:00.0")]
    assert merge_changes(first, again) == [disabled_vfs(PF, 4), unbound("0000:04:00.0")]


def test_reconstruction_from_before_and_after() -> None:
    changes = reconstructed_changes(
        {PF: 4, "0000:83:00.0": 0},
        {PF: 0, "0000:83:00.0": 0},
        [
            BoundFunction(PF, "xe"),
            BoundFunction("0000:04:00.0", "xe"),
            BoundFunction("0000:03:00.1", "xe"),
        ],
        {PF: "xe", "0000:04:00.0": ""},
    )
    # The VF 0000:03:00.1 went with sriov_numvfs; only the present, unbound function is unbound.
    assert changes == [disabled_vfs(PF, 4), unbound("0000:04:00.0")]


def test_bound_and_vfs_round_trip() -> None:
    bound = [BoundFunction("0000:83:00.0", "xe"), BoundFunction(PF, "xe")]
    assert encode_bound(bound) == (
        '[{"pciAddress":"0000:03:00.0","driver":"xe"},{"pciAddress":"0000:83:00.0","driver":"xe"}]'
    )
    assert decode_bound(encode_bound(bound)) == sorted(bound)
    assert decode_vfs(encode_vfs({PF: 4})) == {PF: 4}
    assert decode_bound(None) == []
    assert decode_vfs("") == {}
    assert decode_changes(None) == []


@pytest.mark.parametrize(
    ("decode", "text"),
    [
        (decode_changes, "{not json"),
        (decode_changes, '{"a": 1}'),
        (decode_changes, '[{"nonsense": 1}]'),
        (decode_bound, '[{"pci": 1}]'),
        (decode_vfs, "[1, 2]"),
    ],
)
def test_malformed_annotations_are_a_record_error(decode: object, text: str) -> None:
    with pytest.raises(RecordError):
        decode(text)  # type: ignore[operator]
