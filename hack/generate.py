"""Write every generated file of the repository, or check that the committed ones are current.

    .venv/bin/python hack/generate.py            # rewrite what is stale, remove what is left over
    .venv/bin/python hack/generate.py --check    # exit 1 naming each stale file; change nothing

What is generated, each by a module of hack/generators/:
- gpuctl/api/ from proto/ (protoc: messages, gRPC stubs, typing stubs)            proto.py
- the chart's CRDs from gpuctl/gpudriver/model.py (through gpuctl/crds/gpudriver.py)
  and gpuctl/crds/gpunode.py                                                      crds.py
- the chart's coordinator RBAC template from coordinator/policies/rbac.py                   rbac.py
- the chart's admission guards (Module, NodeModulesConfig, KMM CRD) from
  coordinator/{module,nmc,kmm_crd}_guard.py                                      admission_guards.py
- the flag tables in README.md and docs/ from the three programs' argparse help    flag_docs.py
- examples/argocd/argocd-cm.yaml from examples/argocd/gpudriver-health.lua          argocd.py
- the host paths the chart's agent mounts, from agent/host_paths.py   agent_host_paths.py
- docs/troubleshooting.md from gpuctl/rollout/remedies/                         troubleshooting.py

The test suite runs `--check` (tests/generators/test_generate.py), so a change to a source without
regenerating fails there, with the command that fixes it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: hack/ is sys.path[0], the repository is not
    sys.path.insert(0, str(REPO))

from hack.generators import (  # noqa: E402
    Generator,
    GeneratorError,
    admission_guards,
    agent_host_paths,
    argocd,
    crds,
    flag_docs,
    proto,
    rbac,
    troubleshooting,
)

GENERATORS: tuple[Generator, ...] = (
    proto.GENERATOR,
    crds.GENERATOR,
    rbac.GENERATOR,
    admission_guards.GENERATOR,
    flag_docs.GENERATOR,
    argocd.GENERATOR,
    agent_host_paths.GENERATOR,
    troubleshooting.GENERATOR,
)
FIX = "run: .venv/bin/python hack/generate.py (then review and commit the result)"


@dataclass(frozen=True)
class Difference:
    """A committed file that is not what its generator makes: `content` None means the file
    should not exist."""

    path: Path
    problem: str  # "stale", "missing" or "left over"
    source: str
    content: bytes | None

    def describe(self) -> str:
        verb = "no longer generated from" if self.content is None else "generated from"
        return f"{self.problem}: {self.path} ({verb} {self.source})"


def differences(repo: Path = REPO) -> list[Difference]:
    """Every file under `repo` that differs from what the generators make from `repo` now.
    GeneratorError when a generator cannot run."""
    found = []
    for generator in GENERATORS:
        outputs = generator.outputs(repo)
        for output in sorted(outputs, key=lambda o: o.path):
            target = repo / output.path
            source = output.source or generator.source
            if not target.is_file():
                found.append(Difference(output.path, "missing", source, output.content))
            elif target.read_bytes() != output.content:
                found.append(Difference(output.path, "stale", source, output.content))
        wanted = {output.path for output in outputs}
        for path in sorted(generator.claimed(repo) - wanted):
            found.append(Difference(path, "left over", generator.source, None))
    return found


def problems(repo: Path = REPO) -> list[str]:
    """What `--check` prints: one line per stale file and how to fix them; empty when current."""
    try:
        found = differences(repo)
    except GeneratorError as error:
        return [f"error: {error}"]
    return [d.describe() for d in found] + ([FIX] if found else [])


def write(repo: Path, found: Sequence[Difference]) -> None:
    for difference in found:
        target = repo / difference.path
        if difference.content is None:
            target.unlink()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(difference.content)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="hack/generate.py", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 naming every generated file that is stale",
    )
    check = parser.parse_args(argv).check
    if check:
        lines = problems(REPO)
        for line in lines:
            print(line, file=sys.stderr)
        return 1 if lines else 0
    try:
        found = differences(REPO)
    except GeneratorError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    write(REPO, found)
    for difference in found:
        action = "removed" if difference.content is None else "wrote"
        print(f"{action} {difference.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
