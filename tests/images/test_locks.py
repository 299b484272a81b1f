"""requirements/*.txt, the images' hashed locks, match pyproject.toml (no network: the inputs
digest each lock starts with, and every requirement satisfied by a pin with hashes)."""

from __future__ import annotations

import pytest
from packaging.requirements import Requirement

from hack.images import locks as image_locks
from tests.images.locked import REPO, normalize, pins

LOCKS = image_locks.locks(image_locks.read_pyproject(REPO))
FIX = "run: .venv/bin/python -m hack.images.locks"


@pytest.mark.parametrize("lock", LOCKS, ids=lambda lock: lock.name)
def test_lock_was_compiled_from_pyprojects_requirements(lock: image_locks.Lock) -> None:
    text = (REPO / lock.path).read_text()
    assert image_locks.recorded_digest(text) == image_locks.inputs_digest(lock.requirements), (
        f"{lock.path} is stale: {FIX}"
    )


@pytest.mark.parametrize("lock", LOCKS, ids=lambda lock: lock.name)
def test_every_requirement_is_pinned_to_a_version_it_allows(lock: image_locks.Lock) -> None:
    pinned = pins(REPO / lock.path)
    for line in lock.requirements:
        requirement = Requirement(line)
        name = normalize(requirement.name)
        assert name in pinned, f"{lock.path} does not pin {name}: {FIX}"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"{lock.path} pins {name}=={pinned[name]}, pyproject.toml wants {line}: {FIX}"
        )


@pytest.mark.parametrize("lock", LOCKS, ids=lambda lock: lock.name)
def test_every_pin_has_hashes(lock: image_locks.Lock) -> None:
    # A pin is `name==version \` followed by its `--hash=sha256:...` lines.
    lines = (REPO / lock.path).read_text().splitlines()
    pinned = [i for i, line in enumerate(lines) if line and line[0].isalnum()]
    assert pinned, f"{lock.path} pins nothing"
    for index in pinned:
        assert lines[index].endswith("\\"), lines[index]
        assert lines[index + 1].strip().startswith("--hash=sha256:"), lines[index]


def test_digest_ignores_order_but_not_content() -> None:
    digest = image_locks.inputs_digest
    assert digest(["a==1", "b==2"]) == digest(["b==2", "a==1"])
    assert digest(["a==1", "b==2"]) != digest(["a==1", "b==3"])
    assert digest(["a==1", "b==2"]) != digest(["a==1"])


def test_a_lock_without_a_digest_line_records_none() -> None:
    assert image_locks.recorded_digest("grpcio==1 \\\n") is None
    assert image_locks.recorded_digest(f"{image_locks.DIGEST_PREFIX}abc\n# x\n") == "abc"
