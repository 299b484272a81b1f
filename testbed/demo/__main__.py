"""`python -m testbed.demo` (hack/demo): start the whole system, roll a driver, stop it all.

Ctrl-C (SIGINT), SIGTERM and SIGHUP stop it cleanly at any point: every process it started
is stopped and its temporary folder removed. Exit code 0 when the rollout completed, 1 when
something failed (the reason in the last line), 130 when interrupted.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback
from types import FrameType

from testbed.demo.narrator import Narrator
from testbed.demo.story import tell
from testbed.demo.system import running_system


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="hack/demo",
        description="the whole gpuctl system on this machine: a control plane, KMM's own operator, "
        "the coordinator and four GPU nodes' agents; rolls a GPUDriver to a new version",
    )
    parser.add_argument(
        "--fast",
        action="store_true",
        help="no pauses for reading, the busy node released after 1 s (as the tests run it)",
    )
    args = parser.parse_args(argv)
    busy_seconds, pause, load_seconds = (1.0, 0.0, 0.5) if args.fast else (5.0, 2.0, 2.0)
    # SIGINT too, not only Python's default: a process started with SIGINT ignored (as a
    # non-interactive shell starts its background jobs, and their children inherit it) would
    # otherwise keep ignoring Ctrl-C and run on.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    narrator = Narrator(sys.stdout)
    try:
        with running_system(os.environ, narrator) as system:
            tell(
                system, narrator, busy_seconds=busy_seconds, pause=pause, load_seconds=load_seconds
            )
    except KeyboardInterrupt:
        narrator.step("interrupted: everything was stopped and removed")
        return 130
    except Exception as error:  # everything was stopped; say why in one line, last
        traceback.print_exc()
        narrator.step(f"failed (everything was stopped and removed): {error}")
        return 1
    narrator.step(f"done in {narrator.elapsed():.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
