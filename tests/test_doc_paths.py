"""Every repository path the docs and the module docstrings name exists.

Where: README.md and every Markdown file under docs/ and examples/ (the *docs*), and the module
docstring of every Python file under agent, bench, coordinator, gpuctl, hack, testbed and tests (a
package's `__init__.py` included). What counts as a path there:

1. A *path*: a run of path characters (letters, digits, `_ . - /`) that starts with one of the
   repository's top-level folders and a slash (`gpuctl/rollout/decide.py`, `hack/test`,
   `tests/integration/`), not right after a path character, `:` or `~` (so a URL, `/sys/...`,
   `~/.cache/gpuctl/` or `../shared/fixtures.md` beside the repository are not ours). It is
   relative to the repository's root and must exist (a file, or a folder). A run holding a
   placeholder (`<`, `{`, `*`, `$`) is a pattern, not a path, and a trailing `. , ; :` is
   punctuation. Another tree's paths do not start with one of ours (KMM's
   `internal/filter/filter.go`); the few that do are in UPSTREAM, with whose they are.
2. A *module*: a dotted name that starts with one of the repository's Python packages and whose
   second part is one of that package's modules or packages (`bench.fleet_scale`,
   `coordinator.rollout.controller`, `agent.fdscan.find_fd_holders`): its longest prefix that
   is a module must exist, and the part after it, if any, must be a name that module defines
   or imports at its top level (a submodule counts). A dotted name whose second part is no
   module is something else (the API group `gpuctl.dev`, the chart value
   `coordinator.grpc.tls.mode`).
3. A *link* in the docs: every relative Markdown link target, relative to the file it is in,
   must exist; its `#anchor`, into a Markdown file, must be one of that file's headings
   (GitHub's slugs).

A path a doc names relative to a folder it names nearby (`rollout/step/test_reboots.py` under a
heading about `tests/integration/`) is not checked: write it from the root to have it checked.
The failure lists each `file:line: path`.
"""

from __future__ import annotations

import ast
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCSTRING_FOLDERS = ("agent", "bench", "coordinator", "gpuctl", "hack", "testbed", "tests")
# Paths of other projects that start like one of ours, and whose they are.
UPSTREAM = {
    "docs/mkdocs/documentation/ordered_upgrade.md": "KMM's source",
}
HIDDEN_OURS = {".ci"}
PATH_CHARS = r"[\w./-]"
PLACEHOLDER = re.compile(r"[<>{}*$]")
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"#{1,6} +(.*)")


def top_folders() -> list[str]:
    return sorted(
        p.name
        for p in REPO.iterdir()
        if p.is_dir()
        and (not p.name.startswith(".") or p.name in HIDDEN_OURS)
        and p.name != "__pycache__"
        and not p.name.endswith(".egg-info")
    )


def packages() -> list[str]:
    return [name for name in top_folders() if (REPO / name / "__init__.py").is_file()]


def path_pattern(folders: list[str]) -> re.Pattern[str]:
    tops = "|".join(re.escape(name) for name in folders)
    return re.compile(rf"(?<![\w./:~<>{{}}*$-])((?:{tops})/[\w./<>{{}}*$-]*)")


def module_pattern(names: list[str]) -> re.Pattern[str]:
    tops = "|".join(re.escape(name) for name in names)
    return re.compile(rf"(?<!{PATH_CHARS})((?:{tops})(?:\.[A-Za-z_]\w*)+)(?![\w/-])")


def docs() -> list[Path]:
    folders = ("docs", "examples")
    return [REPO / "README.md", *sorted(p for f in folders for p in (REPO / f).rglob("*.md"))]


def docstring(path: Path) -> tuple[int, str] | None:
    """(its first line, the text) of a module's docstring, read without parsing the module."""
    with path.open() as source:
        for token in tokenize.generate_tokens(source.readline):
            if token.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE):
                continue
            if token.type == tokenize.STRING:
                try:
                    value = ast.literal_eval(token.string)
                except (ValueError, SyntaxError):  # an f-string
                    return None
                return (token.start[0], value) if isinstance(value, str) else None
            return None
    return None


def docstrings() -> Iterator[tuple[Path, int, str]]:
    """(file, the docstring's first line, the docstring) of every module that has one."""
    for folder in DOCSTRING_FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            found = docstring(path)
            if found is not None:
                yield path, *found


def texts() -> Iterator[tuple[Path, int, str]]:
    for path in docs():
        yield path, 1, path.read_text()
    yield from docstrings()


def line_of(text: str, start: int, first: int) -> int:
    return first + text.count("\n", 0, start)


def stale_paths(text: str, pattern: re.Pattern[str]) -> Iterator[tuple[int, str]]:
    """(offset, path) of each path the text names that does not exist."""
    for match in pattern.finditer(text):
        token = match.group(1).rstrip(".,;:")
        if PLACEHOLDER.search(token) or token in UPSTREAM:
            continue
        if not (REPO / token).exists():
            yield match.start(1), token


@cache
def top_level_names(module: Path) -> frozenset[str]:
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return frozenset(names)


def module_file(parts: list[str]) -> Path | None:
    base = REPO.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def stale_module(name: str) -> bool | None:
    """None: not a module reference; True: names a module or a name in one that is not there."""
    parts = name.split(".")
    if module_file(parts[:2]) is None:
        return None
    for end in range(len(parts), 1, -1):
        module = module_file(parts[:end])
        if module is not None:
            rest = parts[end:]
            return bool(rest) and rest[0] not in top_level_names(module)
    return True


def stale_modules(text: str, pattern: re.Pattern[str]) -> Iterator[tuple[int, str]]:
    for match in pattern.finditer(text):
        if stale_module(match.group(1)):
            yield match.start(1), match.group(1)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors(doc: Path) -> frozenset[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        match = None if fenced else HEADING.match(line)
        if match:
            name = slug(match.group(1))
            found.add(f"{name}-{seen[name]}" if name in seen else name)
            seen[name] = seen.get(name, 0) + 1
    return frozenset(found)


def broken_links(doc: Path, text: str) -> Iterator[tuple[int, str]]:
    for match in LINK.finditer(text):
        target = match.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        linked = (doc.parent / file).resolve() if file else doc
        if not linked.exists() or (
            anchor and linked.suffix == ".md" and anchor not in anchors(linked)
        ):
            yield match.start(1), target


def problems() -> list[str]:
    paths = path_pattern(top_folders())
    modules = module_pattern(packages())
    found = []
    for file, first, text in texts():
        where = file.relative_to(REPO)
        checks = [stale_paths(text, paths), stale_modules(text, modules)]
        if file.suffix == ".md":
            checks.append(broken_links(file, text))
        for check in checks:
            found += [f"{where}:{line_of(text, at, first)}: {token}" for at, token in check]
    return sorted(set(found))


def test_every_path_the_docs_and_module_docstrings_name_exists() -> None:
    assert problems() == [], "named but not in the repository:\n" + "\n".join(problems())


def test_the_rules_find_what_they_should_and_only_that() -> None:
    paths = path_pattern(["docs", "gpuctl", "tests"])
    text = (
        "See `gpuctl/rollout/decide.py`, gpuctl/gone.py, tests/integration/, "
        "https://example.com/docs/x.md, /sys/gpuctl/x, ~/.cache/gpuctl/y, ../shared/fixtures.md, "
        "KMM's internal/filter/filter.go, gpuctl.dev/driver-target, tests/<part>/x.py and "
        "docs/mkdocs/documentation/ordered_upgrade.md."
    )
    assert [token for _, token in stale_paths(text, paths)] == ["gpuctl/gone.py"]
    modules = module_pattern(["agent", "coordinator", "gpuctl"])
    text = (
        "agent.fdscan.find_fd_holders, agent.fdscan.nothing_here, gpuctl.rollout.gone, "
        "coordinator.rollout.controller.RolloutController.run, the chart's "
        "coordinator.grpc.tls.mode, the group gpuctl.dev, labels gpuctl.dev/driver-target."
    )
    assert [token for _, token in stale_modules(text, modules)] == [
        "agent.fdscan.nothing_here",
        "gpuctl.rollout.gone",
    ]
    doc = REPO / "docs" / "rollout.md"
    text = "[a](../README.md) [b](rollout.md#nowhere) [c](gone.md) [d](https://x.org/y) [e](#)"
    assert [target for _, target in broken_links(doc, text)] == ["rollout.md#nowhere", "gone.md"]
    assert slug("The floor: KMM's steps 3 and 7 (floor+drain, `bench.x`)") == (
        "the-floor-kmms-steps-3-and-7-floordrain-benchx"
    )
