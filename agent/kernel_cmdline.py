"""The kernel command line (/proc/cmdline) split as the kernel splits it (pure).

The kernel's `parse_args` (kernel/params.c) takes words with `next_arg` (lib/cmdline.c):
whitespace separates them except inside double quotes, a word is `name` or `name=value`, and
the quotes around a value are not part of it. A bare `--` ends the kernel's parameters: what
follows is for init. Names compare with `-` and `_` alike (`parameq`).

Two kinds of parameter matter to whether xe loads:
- a core parameter such as `module_blacklist` (kernel/module/main.c: a `core_param` of type
  charp) holds one value: given twice, the last one is the one set;
- a `__setup` handler such as `nomodeset` (drivers/video/nomodeset.c) is matched on the
  word's start (`obsolete_checksetup` compares only the handler's length), so `nomodeset=0`
  sets it too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KernelParam:
    name: str
    value: str | None  # None for a bare word

    def __str__(self) -> str:
        return self.name if self.value is None else f"{self.name}={self.value}"


def kernel_params(cmdline: str) -> list[KernelParam]:
    """The kernel's parameters in order, up to a bare `--`."""
    params = []
    text = cmdline.strip()
    pos = 0
    while pos < len(text):
        word, pos = _next_word(text, pos)
        name, sep, value = word.partition("=")
        if not sep and name == "--":
            break
        if sep and value.startswith('"'):
            value = value[1:].removesuffix('"')
        params.append(KernelParam(name, value if sep else None))
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return params


def _next_word(text: str, start: int) -> tuple[str, int]:
    """The word at `start` (a leading quote dropped, as `next_arg` does) and where it ends."""
    quoted = text[start] == '"'
    pos = start + 1 if quoted else start
    in_quote = quoted
    end = pos
    while end < len(text) and (in_quote or not text[end].isspace()):
        if text[end] == '"':
            in_quote = not in_quote
        end += 1
    word = text[pos:end]
    return (word.removesuffix('"') if quoted else word), end


def same_name(a: str, b: str) -> bool:
    """The kernel's `parameq`: `-` and `_` alike."""
    return a.replace("-", "_") == b.replace("-", "_")


def last_value(params: list[KernelParam], name: str) -> KernelParam | None:
    """The word that sets a single-valued parameter: the last one naming it."""
    found = [param for param in params if same_name(param.name, name)]
    return found[-1] if found else None


def setup_flag(params: list[KernelParam], name: str) -> KernelParam | None:
    """The first word a `__setup(name, ...)` handler takes (matched on the word's start)."""
    for param in params:
        if same_name(str(param)[: len(name)], name):
            return param
    return None
