"""Fixtures for the agent daemon's tests: a fake GPU node, a token file, a test PKI, and
FakeCoordinators that are always stopped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from testbed.fakehost import FakeHost
from testbed.fakehost.scenarios import B580, arc_b580_in_tree
from tests.agent_daemon.fake_coordinator import FakeCoordinator, MakeCoordinator
from tests.agent_daemon.harness import NODE, TOKEN, Pki, make_pki


def sriov_capable_b580(root: Path) -> FakeHost:
    """Scenario 2 (one B580 on in-tree xe) whose PF can enable up to 12 VFs, none enabled."""
    host = arc_b580_in_tree(root)
    host.remove(f"{host.device_dir(B580)}/sriov_totalvfs")
    for name, value in (
        ("sriov_totalvfs", "12"),
        ("sriov_numvfs", "0"),
        ("sriov_vf_device", "e20b"),
    ):
        host.set_attribute(B580, name, value + "\n")
    return host


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return sriov_capable_b580(tmp_path / "host")


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


@pytest.fixture
def make_coordinator() -> Iterator[MakeCoordinator]:
    started: list[FakeCoordinator] = []

    def make(
        welcome: api.Welcome,
        *,
        pki: Pki | None = None,
        tokens: dict[str, str] | None = None,
        answer_hello_with: api.CoordinatorMessage | None = None,
    ) -> FakeCoordinator:
        coordinator = FakeCoordinator(
            welcome=welcome,
            tokens=tokens if tokens is not None else {TOKEN: NODE},
            serving=pki.serving if pki else None,
            answer_hello_with=answer_hello_with,
        )
        coordinator.start()
        started.append(coordinator)
        return coordinator

    yield make
    for coordinator in started:
        coordinator.stop()
