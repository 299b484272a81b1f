"""Shell completion, run by the real shells: bash and zsh (through its bashcompinit, as
`_bash_complete` calls a bash completion function) source `gpuctl completion`'s script and
complete words; fish completes command lines with `complete -C`."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuctl.cli.completion import bash_script, fish_script, zsh_script
from gpuctl.cli.main import build_parser

PARSER = build_parser()


def shell(name: str) -> str:
    found = shutil.which(name)
    assert found, f"no {name}: hack/shells/ensure installs it (hack/test runs it)"
    return found


def bash_complete(tmp_path: Path, *words: str) -> list[str]:
    script = tmp_path / "gpuctl.bash"
    script.write_text(bash_script(PARSER))
    array = " ".join(f"'{w}'" for w in words)
    program = (
        f"source {script}; COMP_WORDS=({array}); COMP_CWORD={len(words) - 1}; _gpuctl; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(
        [shell("bash"), "-c", program], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def zsh_complete(tmp_path: Path, *words: str) -> list[str]:
    script = tmp_path / "gpuctl.zsh"
    script.write_text(zsh_script(PARSER))
    array = " ".join(f"'{w}'" for w in words)
    # As bashcompinit's _bash_complete calls it: in sh emulation (0-based arrays).
    program = (
        f"source {script}; complete_words() {{ emulate -L sh; COMP_WORDS=({array}); "
        f'COMP_CWORD={len(words) - 1}; _gpuctl; printf "%s\\n" "${{COMPREPLY[@]}}"; }}; '
        "complete_words"
    )
    home = tmp_path / "zdotdir"
    home.mkdir(exist_ok=True)
    done = subprocess.run(
        [shell("zsh"), "-f", "-c", program],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "ZDOTDIR": str(home)},
    )
    assert done.returncode == 0, done.stderr
    assert not done.stderr, done.stderr
    # zsh's own matching keeps what starts with the word typed (bashcompinit's compgen
    # offers every word and leaves that to it).
    return [w for w in done.stdout.split() if w.startswith(words[-1])]


def fish_complete(tmp_path: Path, line: str) -> list[str]:
    script = tmp_path / "gpuctl.fish"
    script.write_text(fish_script(PARSER))
    done = subprocess.run(
        [shell("fish"), "--no-config", "-c", f"source {script}; complete -C '{line}'"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [row.split("\t")[0] for row in done.stdout.splitlines()]


@pytest.mark.parametrize("complete", [bash_complete, zsh_complete])
def test_bash_and_zsh_complete_commands_flags_and_values(
    complete: Callable[..., list[str]], tmp_path: Path
) -> None:
    assert complete(tmp_path, "gpuctl", "roll") == ["rollout"]
    assert complete(tmp_path, "gpuctl", "rollout", "st") == ["status"]
    assert "--watch" in complete(tmp_path, "gpuctl", "rollout", "status", "--")
    formats = ["table", "wide", "json", "yaml", "name", "jsonpath=", "custom-columns="]
    assert complete(tmp_path, "gpuctl", "nodes", "-o", "") == formats
    shells = [w for w in complete(tmp_path, "gpuctl", "completion", "") if not w.startswith("-")]
    assert shells == ["bash", "zsh", "fish"]
    # A flag's value between the words does not lose the command.
    words = ("gpuctl", "rollout", "--kubeconfig", "k", "plan", "--o")
    assert complete(tmp_path, *words) == ["--output"]
    assert complete(tmp_path, "kubectl-gpuctl", "ver") == ["version"]


def test_fish_completes_the_same_tree(tmp_path: Path) -> None:
    assert fish_complete(tmp_path, "gpuctl roll") == ["rollout"]
    assert "status" in fish_complete(tmp_path, "gpuctl rollout ")
    formats = ["custom-columns=", "json", "jsonpath=", "name", "table", "wide", "yaml"]
    assert fish_complete(tmp_path, "gpuctl nodes --output ") == formats
    assert "--watch" in fish_complete(tmp_path, "gpuctl rollout status --")
    assert fish_complete(tmp_path, "kubectl-gpuctl ver") == ["version"]
