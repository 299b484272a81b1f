"""The images' locked dependencies: which of pyproject.toml's requirements each lock file holds,
and writing the locks with hashes.

    .venv/bin/python -m hack.images.locks     # rewrite requirements/*.txt (needs PyPI)

Each image installs its lock with `pip install --require-hashes` before the gpuctl wheel (with
`--no-deps`), so nothing unlocked reaches an image. The lock files are compiled by uv (pinned in
the `dev` extra) for the images' Python (Debian bookworm's 3.11 on x86_64 Linux), and start with
a digest of the requirements they were compiled from: tests/images/test_locks.py recomputes it
from pyproject.toml without the network and fails when a lock is stale.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
DIGEST_PREFIX = "# inputs-sha256: "
# The images' interpreter: Debian bookworm's python3 on the architecture CI builds.
PYTHON_VERSION = "3.11"
PYTHON_PLATFORM = "x86_64-unknown-linux-gnu"


@dataclass(frozen=True)
class Lock:
    """`path` (relative to the repository) locks `requirements`, taken from pyproject.toml."""

    name: str
    path: Path
    requirements: tuple[str, ...]
    purpose: str


def locks(pyproject: dict[str, object]) -> list[Lock]:
    """The lock files the images install, each with the requirements it must satisfy."""
    project = pyproject["project"]
    build_system = pyproject["build-system"]
    assert isinstance(project, dict)
    assert isinstance(build_system, dict)
    core = tuple(project["dependencies"])
    extras = project["optional-dependencies"]
    return [
        Lock(
            "agent",
            Path("requirements/agent.txt"),
            core,
            "Dockerfile.agent: gpuctl's core dependencies, what the agent imports",
        ),
        Lock(
            "coordinator",
            Path("requirements/coordinator.txt"),
            core + tuple(extras["coordinator"]),
            "Dockerfile.coordinator: the core and the coordinator extra",
        ),
        Lock(
            "build",
            Path("requirements/build.txt"),
            tuple(build_system["requires"]),
            "both Dockerfiles' wheel stage: the build backend",
        ),
    ]


def read_pyproject(repo: Path = REPO) -> dict[str, object]:
    with (repo / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def inputs_digest(requirements: Sequence[str]) -> str:
    """The same for the same set of requirement strings, in any order."""
    text = "\n".join(sorted(r.strip() for r in requirements)) + "\n"
    return hashlib.sha256(text.encode()).hexdigest()


def recorded_digest(lock_text: str) -> str | None:
    """The inputs digest a lock file starts with, or None when it has none."""
    first = lock_text.split("\n", 1)[0]
    return first.removeprefix(DIGEST_PREFIX) if first.startswith(DIGEST_PREFIX) else None


def compile_lock(lock: Lock, uv: Path) -> str:
    """The lock file's text: uv's hashed pins for `lock.requirements`, under the digest line."""
    with tempfile.TemporaryDirectory() as work:
        source = f"{lock.name}.in"
        (Path(work) / source).write_text("\n".join(lock.requirements) + "\n")
        done = subprocess.run(
            [
                str(uv), "pip", "compile", source,
                "--generate-hashes",
                "--python-version", PYTHON_VERSION,
                "--python-platform", PYTHON_PLATFORM,
                "--no-strip-extras",
                "--custom-compile-command", ".venv/bin/python -m hack.images.locks",
                "--quiet",
            ],
            cwd=work, capture_output=True, text=True, check=False,
        )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"uv pip compile for {lock.path} failed:\n{done.stderr}")
    header = f"{DIGEST_PREFIX}{inputs_digest(lock.requirements)}\n# {lock.purpose}\n"
    return header + done.stdout


def main() -> int:
    uv = Path(sys.executable).parent / "uv"
    for lock in locks(read_pyproject()):
        target = REPO / lock.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(compile_lock(lock, uv))
        print(f"wrote {lock.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
