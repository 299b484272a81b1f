"""A coordinator with one of its guards switched off, to show a world run catches the bug.

    python -m testbed.world.mutant MUTANT [COORDINATOR FLAGS...]

runs `gpuctl-coordinator` (coordinator.main) with MUTANT applied in its process first. The
mutants are the rules a world run exists to defend; `tests/integration/chaos/test_world.py`
runs one and expects a breach. Nothing outside the tests starts this.

- `no-reboot-hold`: a node's reboot is never taken up (gpuctl/rollout/place/node_place.py
  sees no reboot): KMM's loader at the new boot runs unheld, and a node rebooted into a busy
  in-tree `xe` is unloaded under its user, or a Done node stays Done unverified.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from coordinator.main import main
from gpuctl.rollout.place import node_place


def _no_reboot_hold() -> None:
    node_place.reboot_taken_up = lambda _inp, _node: None  # type: ignore[attr-defined,assignment]


MUTANTS: dict[str, Callable[[], None]] = {"no-reboot-hold": _no_reboot_hold}


def mutant_command(name: str) -> list[str]:
    """The command that runs the coordinator as MUTANT `name` (before its flags)."""
    return [sys.executable, "-m", "testbed.world.mutant", name]


def run(argv: list[str]) -> int:
    if not argv or argv[0] not in MUTANTS:
        sys.stderr.write(f"usage: python -m testbed.world.mutant {{{','.join(MUTANTS)}}} FLAGS\n")
        return 2
    MUTANTS[argv[0]]()
    return main(argv[1:])


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
