"""Read the Dockerfile KMM writes for a sign Pod, strictly: the stages and steps it asks of
kaniko, or DockerfileError naming the line this stand-in does not understand (pure).

KMM (internal/buildsign/resource/templates/Dockerfile.gotmpl) writes three stages: ``FROM
<unsigned image> as source``; ``FROM <sign image> AS signimage`` that copies the source's
module folder (``COPY --from=source <dirName> /opt<dirName>``) and, for each of the Module's
``filesToSign``, runs::

    RUN for file in /opt<file>; do \\
          [ -e "${file}" ] && /usr/local/bin/sign-file sha256 /run/secrets/key/key.pem \\
          /run/secrets/cert/cert.pem "${file}"; \\
        done

then ``FROM source`` with the signed folder copied back (``COPY --from=signimage``). What is
read: lines joined at a trailing backslash, blank and ``#`` comment lines skipped,
instructions in any case; ``FROM <image> [AS <name>]``, ``COPY --from=<stage> <src> <dst>``
and that one ``RUN`` shell loop (any variable name, any number of words, globs allowed, but no
other shell: no quotes, ``$`` or ``;`` in the words). Nothing else: whatever kaniko would do
with it, here it is an error, never a silent success.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_WORD = re.compile(r"^[A-Za-z0-9_./*?\[\]+,:@%=-]+$")
_SIGN_LOOP = re.compile(
    r"^for (?P<var>[A-Za-z_][A-Za-z0-9_]*) in (?P<words>[^;]+); do "
    r'\[ -e "\$\{(?P=var)\}" \] && '
    r'(?P<tool>\S+) (?P<digest>\S+) (?P<key>\S+) (?P<certificate>\S+) "\$\{(?P=var)\}"; '
    r"done$"
)


class DockerfileError(ValueError):
    """A line of the Dockerfile this stand-in does not understand."""

    def __init__(self, line: int, text: str, why: str) -> None:
        super().__init__(f"Dockerfile line {line}: {why}: {text!r}")
        self.line = line


@dataclass(frozen=True)
class Copy:
    """``COPY --from=<stage> <source> <destination>``."""

    line: int
    stage: str
    source: str
    destination: str


@dataclass(frozen=True)
class SignLoop:
    """The ``RUN for …; do [ -e … ] && <tool> <digest> <key> <certificate> …; done`` loop:
    ``words`` as written (paths, maybe globs), the tool and its first three arguments."""

    line: int
    words: tuple[str, ...]
    tool: str
    digest: str
    key: str
    certificate: str


@dataclass(frozen=True)
class Stage:
    """``FROM <base> [AS <name>]`` and the steps after it."""

    line: int
    base: str
    name: str | None
    steps: tuple[Copy | SignLoop, ...] = ()


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(number of its first line, text) of each instruction: continued lines joined, blank
    and comment lines skipped."""
    found: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending.append(line[:-1])
            continue
        pending.append(line)
        found.append((start, " ".join(part.strip() for part in pending if part.strip())))
        pending = []
    if pending:
        raise DockerfileError(start, " ".join(pending), "the last instruction is never finished")
    return found


def _from(number: int, text: str, words: list[str]) -> Stage:
    if len(words) == 1 and not words[0].startswith("--"):
        return Stage(number, words[0], None)
    if len(words) == 3 and words[1].lower() == "as" and not words[0].startswith("--"):
        return Stage(number, words[0], words[2])
    raise DockerfileError(number, text, "FROM takes an image and an optional AS <name>")


def _copy(number: int, text: str, words: list[str]) -> Copy:
    if len(words) != 3 or not words[0].startswith("--from="):
        raise DockerfileError(number, text, "COPY takes --from=<stage> <source> <destination>")
    stage = words[0].removeprefix("--from=")
    for path in (stage, *words[1:]):
        if not path or not _WORD.match(path):
            raise DockerfileError(number, text, f"COPY {path!r} is not a plain name or path")
    if not words[1].startswith("/") or not words[2].startswith("/"):
        raise DockerfileError(number, text, "COPY paths must be absolute")
    return Copy(number, stage, words[1], words[2])


def _run(number: int, text: str, command: str) -> SignLoop:
    match = _SIGN_LOOP.match(" ".join(command.split()))
    if match is None:
        raise DockerfileError(number, text, "RUN is not KMM's sign-file loop")
    words = tuple(match["words"].split())
    for word in words:
        if not _WORD.match(word) or not word.startswith("/"):
            raise DockerfileError(number, text, f"{word!r} is not an absolute path or glob")
    return SignLoop(
        number, words, match["tool"], match["digest"], match["key"], match["certificate"]
    )


def parse(text: str) -> list[Stage]:
    """The stages of ``text``, each with its steps; DockerfileError at the first line not
    understood (an empty Dockerfile, a step before any FROM, another instruction)."""
    stages: list[Stage] = []
    for number, line in logical_lines(text):
        instruction, _, rest = line.partition(" ")
        keyword = instruction.upper()
        if keyword == "FROM":
            stage = _from(number, line, rest.split())
            if stage.name is not None and stage.name in {s.name for s in stages}:
                raise DockerfileError(number, line, "a stage name used twice")
            stages.append(stage)
            continue
        if keyword not in ("COPY", "RUN"):
            raise DockerfileError(number, line, f"{instruction} is not an instruction read here")
        if not stages:
            raise DockerfileError(number, line, f"{keyword} before any FROM")
        step = _copy(number, line, rest.split()) if keyword == "COPY" else _run(number, line, rest)
        last = stages[-1]
        stages[-1] = Stage(last.line, last.base, last.name, (*last.steps, step))
    if not stages:
        raise DockerfileError(0, text, "no FROM: nothing to build")
    return stages
