"""Aligned plain-text tables, the way kubectl prints them: upper-case headers, two-space gaps."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, show_headers: bool = True
) -> str:
    """Left-aligned columns separated by at least two spaces; no trailing blanks; the header
    line left out where not `show_headers` (kubectl's --no-headers: the columns as wide)."""
    widths = [len(h) for h in headers]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row has {len(row)} cells, table has {len(headers)} columns")
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = []
    for row in [list(headers), *rows] if show_headers else rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"
