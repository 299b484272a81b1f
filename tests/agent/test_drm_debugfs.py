"""The parser of the kernel's DRM client list (debugfs `clients`), on text as drm_debugfs.c
prints it in each kernel generation, and on what it must refuse."""

from __future__ import annotations

import pytest

from agent.drm_debugfs import (
    DebugfsFormatError,
    KernelClient,
    minor_number,
    parse_clients,
)
from testbed.fakehost.drm_text import DEBUGFS_STYLES, debugfs_clients_text

ROWS = [("Xorg", 1500, 0, 7), ("ollama", 2101, 128, 42)]


@pytest.mark.parametrize("style", DEBUGFS_STYLES)
def test_every_kernel_format(style: str) -> None:
    clients = parse_clients(debugfs_clients_text(style, ROWS), {0, 128})
    with_id = style == "id"
    assert clients == [
        KernelClient("Xorg", 1500, 0, 7 if with_id else None),
        KernelClient("ollama", 2101, 128, 42 if with_id else None),
    ]


def test_a_command_with_spaces_and_digits_is_split_from_the_right() -> None:
    text = debugfs_clients_text("id", [("Web 1 2 n y 3", 77, 128, 5), ("", 78, 0, 6)])
    assert parse_clients(text, {0, 128}) == [
        KernelClient("Web 1 2 n y 3", 77, 128, 5),
        KernelClient("", 78, 0, 6),
    ]


def test_no_clients_is_a_header_alone() -> None:
    assert parse_clients(debugfs_clients_text("tgid", []), {0}) == []


def test_the_kernel_row_as_printed_by_drm_clients_info() -> None:
    # "%20s %5d %3d   %c    %c %5d %10u" then the name ("%*s") and id ("%20llu").
    text = (
        "             command  tgid dev master a   uid      magic"
        f" {'name':>64} {'id':>20}\n"
        "         gnome-shell  1234   0   y    y  1000          0"
        f" {'<unset>':>64} {'11':>20}\n"
    )
    assert parse_clients(text, {0, 128}) == [KernelClient("gnome-shell", 1234, 0, 11)]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "no header"),
        ("command pid\n", "unknown header"),
        (debugfs_clients_text("id", []) + "  foo 12 0 y\n", "columns"),
        (debugfs_clients_text("tgid", []) + " x 12 0 maybe y 0 0\n", "y or n"),
        (debugfs_clients_text("tgid", []) + " x twelve 0 n y 0 0\n", "tgid"),
        (debugfs_clients_text("tgid", []) + " x ١٢ 0 n y 0 0\n", "tgid"),
        (debugfs_clients_text("tgid", []) + " x -1 0 n y 0 0\n", "tgid"),
        (debugfs_clients_text("tgid", [("x", 5, 3, 0)]), "minor 3"),
        # A comm with a newline splits its row: the first half has no columns.
        (debugfs_clients_text("tgid", [("evil\nx", 5, 0, 0)]), "columns"),
    ],
)
def test_anything_else_is_refused(text: str, why: str) -> None:
    with pytest.raises(DebugfsFormatError, match=why):
        parse_clients(text, {0, 128})


def test_minor_numbers() -> None:
    assert (minor_number("card3"), minor_number("renderD131")) == (3, 131)
