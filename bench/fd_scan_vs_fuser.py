"""The agent's fd scanner against `fuser` on this machine's real /proc, in the same run.

Starts 2,000 sleeping processes that share 40 open fds each (one of them on a target file),
then asks both "who holds the target open?": `fuser TARGET` (Debian's psmisc) as a command,
and `agent.fdscan.find_fd_holders("/proc", {TARGET})` as the long-lived agent calls it.
Checks that both name the same processes, then prints median/p95 of each and the ratio.

    .venv/bin/python -m bench.fd_scan_vs_fuser [--processes 2000] [--runs 15]

The sleepers are killed on the way out, whatever happens.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agent.fdscan import find_fd_holders
from bench.timing import measure_interleaved, ratio_line

FDS_PER_PROCESS = 40


@contextmanager
def sleepers(count: int, fds: list[int]) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            started.append(
                subprocess.Popen(
                    ["sleep", "600"],
                    pass_fds=fds,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        yield started
    finally:
        for process in started:
            process.kill()
        for process in started:
            process.wait()


def fuser_pids(fuser: str, target: Path) -> set[int]:
    done = subprocess.run([fuser, str(target)], capture_output=True, text=True, check=False)
    return {int(word.rstrip("cefFrmn")) for word in done.stdout.split()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    fuser = shutil.which("fuser")
    if fuser is None:
        print("fuser not found: apt-get install psmisc", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        files = [Path(tmp) / f"f{n}" for n in range(FDS_PER_PROCESS)]
        for path in files:
            path.write_bytes(b"")
        target = files[FDS_PER_PROCESS // 2]
        fds = [os.open(path, os.O_RDONLY) for path in files]
        try:
            with sleepers(args.processes, fds) as started:
                expected = {p.pid for p in started} | {os.getpid()}
                ours = set(find_fd_holders("/proc", frozenset({str(target)})).holders)
                theirs = fuser_pids(fuser, target)
                if not expected <= ours or not expected <= theirs:
                    print(f"disagreement: ours {len(ours)}, fuser {len(theirs)}", file=sys.stderr)
                    return 1
                print(
                    f"{args.processes} sleepers x {FDS_PER_PROCESS} shared fds; "
                    f"both found {len(ours)} holders of the target"
                )
                baseline, subject = measure_interleaved(
                    {
                        "fuser": lambda: fuser_pids(fuser, target),
                        "find_fd_holders": lambda: find_fd_holders(
                            "/proc", frozenset({str(target)})
                        ),
                    },
                    args.runs,
                )
        finally:
            for fd in fds:
                os.close(fd)
    print(baseline.summary())
    print(subject.summary())
    print(ratio_line(subject, baseline))
    return 0


if __name__ == "__main__":
    sys.exit(main())
