"""bench.world's --weight: a known kind and a weight of 0 or more, else argparse says why."""

from __future__ import annotations

import argparse

import pytest

from bench.world import weight


def test_a_weight_names_a_known_kind_and_a_number() -> None:
    assert weight("admin-drain=6") == ("admin-drain", 6.0)
    assert weight("daemons-undeclared=0") == ("daemons-undeclared", 0.0)
    for wrong, said in (
        ("reboot-sideways=1", "unknown event kind 'reboot-sideways'"),
        ("admin-drain=many", "not KIND=W"),
        ("admin-drain", "not KIND=W"),
        ("admin-drain=-1", "0 or more"),
    ):
        with pytest.raises(argparse.ArgumentTypeError, match=said):
            weight(wrong)
