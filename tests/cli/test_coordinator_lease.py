"""gpuctl/cli/coordinator_lease.py: the coordinator's Lease among a namespace's, when the
chart's default for release `gpuctl` is missing."""

from __future__ import annotations

import pytest

from gpuctl.cli.coordinator_lease import annotated_leases, chosen_lease
from gpuctl.cli.errors import CommandError
from gpuctl.common import names


def lease(name: str, *, ours: bool) -> dict[str, object]:
    notes = {names.COORDINATOR_VERSION: "0.9.0"} if ours else {"other": "x"}
    return {"metadata": {"name": name, "annotations": notes}}


def test_the_one_a_coordinator_annotated_is_taken() -> None:
    leases = [lease("kube-scheduler", ours=False), lease("prod-gpuctl-coordinator", ours=True)]
    assert annotated_leases(leases) == ["prod-gpuctl-coordinator"]
    assert chosen_lease("gpu", leases) == "prod-gpuctl-coordinator"


def test_none_leaves_the_default_whose_read_says_it_is_missing() -> None:
    assert chosen_lease("gpu", [lease("kube-scheduler", ours=False)]) == "gpuctl-coordinator"
    assert chosen_lease("gpu", []) == names.DEFAULT_COORDINATOR_LEASE


def test_two_are_the_admins_choice() -> None:
    leases = [lease("b-coordinator", ours=True), lease("a-coordinator", ours=True)]
    with pytest.raises(CommandError, match="gpu: a-coordinator, b-coordinator; name one"):
        chosen_lease("gpu", leases)
