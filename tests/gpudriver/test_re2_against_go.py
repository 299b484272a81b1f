"""gpuctl's reading of kernel-mapping regexps (gpuctl.gpudriver.re2, through the GPUDriver
validation) against Go's own `regexp` package, which KMM compiles them with.

A small Go program (tests/go_regexp/, the standard library only) is built with the Go
toolchain CI has (it builds KMM too) and answers, for each pattern and kernel string, whether
Go compiles the pattern and whether it matches. For every pattern of a fixed list of known
differences and of a seeded random corpus built from RE2 and Python syntax:

- a pattern Go refuses, gpuctl refuses (as KMM's webhook would);
- a pattern gpuctl accepts, Go accepts, and matches exactly the kernels gpuctl matches.

gpuctl may refuse more than Go (what the two read differently): that is the point.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuctl.gpudriver import re2
from gpuctl.gpudriver.validation import regexp_problem

SOURCE = Path(__file__).resolve().parents[1] / "go_regexp"
KERNELS = [
    "6.8.0-60-generic",
    "6.8.0-60-generic\n",
    "6.8.0-1017-intel",
    "6.8",
    "6.88",
    "6.8{,2}",
    "5.15.0-rt",
    "6.8.0-60-GENERIC",
    "[:alpha:]",
    "é6.8",
    "",
]
KNOWN = [
    r"^.+$",
    r"^6\.8\.0-[0-9]+-generic$",
    r"^6\.8{,2}$",
    r"6\.8{,}",
    r"^6\.8{2}",
    r"[[:alpha:]]",
    r"[[:digit:]]+",
    r"\pL",
    r"\PL",
    r"\p{Greek}",
    r"\Q6.8\E",
    r"\x{36}",
    r"\x36",
    r"\C",
    r"(?U)6.*",
    r"(?<n>6)",
    r"(?P<n>6)",
    r"(?x)6 \. 8",
    r"(?a)6",
    r"(?u)6",
    r"(?i)generic",
    r"(?i:GEN)eric",
    r"(?-i)a",
    r"(?m)^6",
    r"\d+",
    r"\w+",
    r"\b6",
    r"\B8",
    r"\A6",
    r"6\.8\z",
    r"6\.8\Z",
    r"a{1001}",
    r"a{2}{3}",
    r"a**",
    r"[a-\d]",
    r"[\d-z]",
    r"[z-\d]",
    r"[-\d]",
    r"[\d-]",
    r"\N{DIGIT SIX}",
    r"\u0036",
    r"\e",
    r"\0",
    r"[]a]",
    r"[^]a]",
    r"generic$",
    r"^6(?=\.8)",
    r"(6)\1",
    r"^6.*+$",
]
# Pieces of RE2 and Python syntax the random patterns are made of.
PIECES = [
    "6", "8", "0", "\\.", ".", "-", "generic", "rt", "^", "$", "*", "+", "?", "*?", "{2}",
    "{,2}", "{1,}", "{0,3}", "(", ")", "(?:", "[", "]", "[^", "\\d", "\\D", "\\w", "\\s", "\\b",
    "|", "(?i)", "(?m)", "(?s)", "(?U)", "(?-i)", "(?i:", "\\z", "\\Z", "\\A", "[[:digit:]]",
    "\\pN", "(?P<a>", "(?<a>", "\\x{36}", "\\x36", "\\Q.\\E", "a{1001}", "[0-9]", "[a-z-]",
    "\\-", "\\n", "\\t",
]  # fmt: skip
RANDOM_PATTERNS = 3000


@pytest.fixture(scope="module")
def go_regexp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None:
        raise AssertionError("the Go toolchain is needed (CI has it: hack/kmm/ensure builds KMM)")
    binary = tmp_path_factory.mktemp("go_regexp") / "go_regexp"
    subprocess.run([go, "build", "-o", str(binary), "."], cwd=SOURCE, check=True)
    return binary


def random_patterns(count: int) -> list[str]:
    chooser = random.Random(20261202)  # noqa: S311 (a fixed corpus, not a secret)
    return ["".join(chooser.choices(PIECES, k=chooser.randint(1, 7))) for _ in range(count)]


def go_verdicts(binary: Path, patterns: list[str]) -> dict[str, dict[str, bool] | str]:
    """Per pattern: Go's compile error, or its match per kernel."""
    pairs = [[pattern, kernel] for pattern in patterns for kernel in KERNELS]
    answer = subprocess.run(
        [str(binary)], input=json.dumps(pairs), capture_output=True, text=True, check=True
    )
    verdicts: dict[str, dict[str, bool] | str] = {}
    for (pattern, kernel), verdict in zip(pairs, json.loads(answer.stdout), strict=True):
        if verdict.get("error"):
            verdicts[pattern] = str(verdict["error"])
        else:
            matches = verdicts.setdefault(pattern, {})
            assert isinstance(matches, dict)
            matches[kernel] = bool(verdict["match"])
    return verdicts


def disagreements(binary: Path, patterns: list[str]) -> dict[str, str]:
    found = {}
    for pattern, verdict in go_verdicts(binary, sorted(set(patterns))).items():
        problem = regexp_problem(pattern)
        if isinstance(verdict, str):
            if problem is None:
                found[pattern] = f"Go refuses ({verdict}); gpuctl accepts"
            continue
        if problem is not None:
            continue  # gpuctl refusing what Go reads differently is allowed
        ours = {kernel: re2.search(pattern, kernel) for kernel in KERNELS}
        differ = {k: (verdict[k], ours[k]) for k in KERNELS if verdict[k] != ours[k]}
        if differ:
            found[pattern] = f"(Go, gpuctl) match differently: {differ}"
    return found


def test_gpuctl_reads_every_known_difference_as_go_does_or_refuses_it(go_regexp: Path) -> None:
    assert disagreements(go_regexp, KNOWN) == {}
    # The differences that motivated this are refused, saying how to write them.
    for pattern, words in [
        (r"^6\.8{,2}$", "write x{0,n}"),
        (r"[[:digit:]]+", "POSIX class"),
        (r"\pL", "Unicode class"),
        (r"(?<n>6)", "(?P<name>...)"),
        (r"(?x)6 \. 8", "the flag 'x'"),
    ]:
        assert words in str(regexp_problem(pattern)), pattern


def test_gpuctl_reads_random_patterns_as_go_does_or_refuses_them(go_regexp: Path) -> None:
    patterns = random_patterns(RANDOM_PATTERNS)
    assert disagreements(go_regexp, patterns) == {}
    accepted = [p for p in set(patterns) if regexp_problem(p) is None]
    assert len(accepted) > RANDOM_PATTERNS // 10  # the corpus is not all refusals
