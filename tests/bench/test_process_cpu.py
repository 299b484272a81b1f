"""bench.process_cpu: whose CPU time a bench run was, from a /proc tree written here."""

from __future__ import annotations

from pathlib import Path

from bench.process_cpu import KERNEL, cpu_by_name, cpu_words, process_cpu, process_name


def _process(
    proc: Path,
    pid: int,
    comm: str,
    argv: list[str],
    ticks: tuple[int, int, int, int],
    *,
    start: int,
) -> None:
    folder = proc / str(pid)
    folder.mkdir(parents=True, exist_ok=True)
    utime, stime, cutime, cstime = ticks
    # Fields 3.. of proc(5): state ppid pgrp session tty tpgid flags minflt cminflt majflt
    # cmajflt utime stime cutime cstime priority nice threads itrealvalue starttime.
    rest = f"S 1 1 1 0 -1 0 0 0 0 0 {utime} {stime} {cutime} {cstime} 20 0 1 0 {start} 0"
    (folder / "stat").write_text(f"{pid} ({comm}) {rest}\n")
    (folder / "cmdline").write_bytes(
        b"\0".join(a.encode() for a in argv) + (b"\0" if argv else b"")
    )


def test_names_say_which_program_each_process_is() -> None:
    assert process_name("kube-apiserver", ["/x/kube-apiserver", "--v=1"]) == "kube-apiserver"
    assert process_name("python", [".venv/bin/python", "-m", "bench.fleet_scale"]) == (
        "bench.fleet_scale"
    )
    assert process_name("python3", ["python3", "-B", "/a/agent_swarm.py", "x"]) == "agent_swarm.py"
    spawned = ["python", "-B", "-c", "from multiprocessing.spawn import spawn_main"]
    assert process_name("python", spawned) == "multiprocessing"
    assert process_name("kdamond.0", []) == KERNEL


def test_seconds_by_name_between_two_readings(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _process(proc, 10, "kube-apiserver", ["/bin/kube-apiserver"], (100, 50, 0, 0), start=5)
    _process(proc, 11, "manager", ["/kmm/manager"], (40, 10, 0, 0), start=6)
    _process(proc, 12, "odd) name", ["/bin/odd"], (1, 1, 0, 0), start=7)
    (proc / "self").mkdir()  # not a pid: ignored
    before = process_cpu(proc)
    assert {p.name for p in before.values()} == {"kube-apiserver", "manager", "odd) name"}
    # The API server works 2 s more; KMM's manager ran a worker that exited (its children's
    # time); pid 12 ended and pid 12 is now another process; a kernel thread started.
    _process(proc, 10, "kube-apiserver", ["/bin/kube-apiserver"], (250, 100, 0, 0), start=5)
    _process(proc, 11, "manager", ["/kmm/manager"], (40, 10, 30, 20), start=6)
    _process(proc, 12, "etcd", ["/bin/etcd"], (25, 25, 0, 0), start=900)
    _process(proc, 13, "kworker/0:1", [], (3, 0, 0, 0), start=901)
    used = cpu_by_name(before, process_cpu(proc), ticks_per_second=100)
    assert used == {"kube-apiserver": 2.0, "manager": 0.5, "etcd": 0.5, KERNEL: 0.03}
    assert list(used) == ["kube-apiserver", "etcd", "manager", KERNEL]  # most first, then name


def test_a_process_gone_while_reading_is_left_out(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _process(proc, 10, "etcd", ["/bin/etcd"], (1, 0, 0, 0), start=1)
    (proc / "11").mkdir()  # its files gone before they were read
    assert [p.name for p in process_cpu(proc).values()] == ["etcd"]


def test_runs_side_by_side_ranked_by_the_first() -> None:
    runs = {
        "gpuctl": {"kube-apiserver": 120.0, "manager": 110.5, "etcd": 9.0, "kwok": 1.0},
        "floor": {"manager": 100.0, "kube-apiserver": 60.25, "etcd": 8.0, "kube-scheduler": 2.0},
    }
    assert cpu_words(runs, top=2) == (
        "kube-apiserver 120.0 vs 60.2, manager 110.5 vs 100.0, the rest 10.0 vs 10.0"
    )
    assert cpu_words({}) == ""
