"""An unknown flag is answered with the usage of the command it was given to, as kubectl does,
not with gpuctl's top-level usage (gpuctl/cli/main.py)."""

from __future__ import annotations

import pytest

from gpuctl.cli.main import main


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["rollout", "status", "--bogus"], "usage: gpuctl rollout status "),
        (["nodes", "--bogus"], "usage: gpuctl nodes "),
        (["node", "inspect", "--local", "--bogus"], "usage: gpuctl node inspect "),
    ],
)
def test_an_unknown_flag_gets_its_commands_usage(
    argv: list[str], usage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage), err
    assert err.rstrip().endswith("error: unrecognized arguments: --bogus")


def test_without_a_command_the_usage_is_gpuctls(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--bogus"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith("usage: gpuctl [-h]")
