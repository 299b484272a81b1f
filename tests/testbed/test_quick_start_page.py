"""How testbed/demo/quick_start.py reads a getting-started page and compares what a command
printed with what the page shows; the quick start's integration test stands on both
(tests/integration/demo/test_quick_start.py)."""

from __future__ import annotations

import pytest

from testbed.demo.quick_start import Command, File, PageError, read_steps, unmatched
from testbed.harness.cluster import repository_root

PAGE = """\
# Title

## 1. First

    kubectl get crd x        # KMM is installed
    helm install a charts/a \\
      --set b=c

```yaml
kind: GPUDriver
```

    kubectl apply -f d.yaml

## 2. Second

    $ gpuctl rollout status --watch
    Rollout of d to v1-1a2b3c4d: Held ...
    waiting for you: held

Later, how the watch can end instead:

      gpu-2: Blocked
    waiting for you: blocked
"""


def test_commands_files_and_shown_output_in_the_pages_order() -> None:
    steps = read_steps(PAGE)
    assert steps[0] == Command("1. First", "kubectl get crd x", "KMM is installed")
    assert isinstance(steps[1], Command)
    assert " ".join(steps[1].text.split()) == "helm install a charts/a --set b=c"
    assert steps[2] == File("1. First", "d.yaml", "kind: GPUDriver")
    assert steps[3] == Command("1. First", "kubectl apply -f d.yaml")
    watch = steps[4]
    assert isinstance(watch, Command)
    assert watch.text == "gpuctl rollout status --watch"
    # The block of output alone belongs to the command before it.
    assert watch.shown == [
        "Rollout of d to v1-1a2b3c4d: Held ...",
        "waiting for you: held",
        "  gpu-2: Blocked",
        "waiting for you: blocked",
    ]
    assert len(steps) == 5


def test_a_command_of_another_program_beside_commands_is_refused() -> None:
    with pytest.raises(PageError, match="mixes commands"):
        read_steps("## 1. A\n\n    kubectl get nodes\n    oc get nodes\n")


def test_a_yaml_block_no_command_applies_is_refused() -> None:
    with pytest.raises(PageError, match="no `kubectl apply -f`"):
        read_steps("## 1. A\n\n```yaml\nkind: X\n```\n")


def test_shown_lines_are_found_in_order_and_the_last_ends_the_output() -> None:
    shown = ["Rollout of d to v1-1a2b3c4d: Held ...", "  ...", "waiting for you: held"]
    printed = [
        "Rollout of d to v1-84a28de8: Held, 1 of 3 (started 2s ago)",
        "  gpu-2: Pending",
        "waiting for you: held",
    ]
    assert unmatched(shown, printed) is None
    assert "not the last line" in str(unmatched(shown, [*printed, "more"]))
    assert "not printed" in str(unmatched(shown, list(reversed(printed))))
    # The example digest stands for a digest, not for anything.
    assert "not printed" in str(unmatched(shown, ["Rollout of d to v1: Held", printed[2]]))
    assert "not printed" in str(unmatched(["a"], ["  a"]))  # indentation is what it shows


def test_the_getting_started_page_reads() -> None:
    steps = read_steps((repository_root() / "docs" / "getting-started.md").read_text())
    commands = [step for step in steps if isinstance(step, Command)]
    assert [step.name for step in steps if isinstance(step, File)] == ["xe-driver.yaml"]
    assert any(command.shown for command in commands)
