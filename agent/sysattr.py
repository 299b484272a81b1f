"""Read single-value sysfs/procfs attributes and parse them, noting bad input as warnings.

The kernel prints one value per file ("0x8086\n", "-1\n", "live\n"). Anything else -
garbage, a missing file that should exist, an unreadable file - becomes a warning and a
`None` result, never an exception, so one bad attribute costs only that attribute.
"""

from __future__ import annotations

from agent.hostfs import HostFiles
from agent.warninglog import WarningLog

_SHOWN_GARBAGE = 40


def read_attribute(
    files: HostFiles, relative: str, log: WarningLog, *, missing_ok: bool = False
) -> str | None:
    """The stripped content of one attribute file, or None (with a warning) if unreadable.

    With `missing_ok`, an absent file is an ordinary `None` without a warning (attributes
    that only some devices or kernels have).
    """
    try:
        return files.read_text(relative).strip()
    except FileNotFoundError:
        if not missing_ok:
            log.add(relative, "missing")
        return None
    except (OSError, UnicodeDecodeError) as error:
        log.add_error(relative, error)
        return None


def _shown(text: str) -> str:
    return repr(text if len(text) <= _SHOWN_GARBAGE else text[:_SHOWN_GARBAGE] + "...")


def parse_hex(text: str | None, relative: str, log: WarningLog) -> int | None:
    """Parse "0x8086" (the "0x" is optional, as in `sriov_vf_device`)."""
    if text is None:
        return None
    try:
        return int(text, 16)
    except ValueError:
        log.add(relative, f"not a hexadecimal number: {_shown(text)}")
        return None


def parse_decimal(text: str | None, relative: str, log: WarningLog) -> int | None:
    if text is None:
        return None
    try:
        return int(text, 10)
    except ValueError:
        log.add(relative, f"not a decimal number: {_shown(text)}")
        return None


def read_hex(
    files: HostFiles, relative: str, log: WarningLog, *, missing_ok: bool = False
) -> int | None:
    return parse_hex(read_attribute(files, relative, log, missing_ok=missing_ok), relative, log)


def read_decimal(
    files: HostFiles, relative: str, log: WarningLog, *, missing_ok: bool = False
) -> int | None:
    return parse_decimal(read_attribute(files, relative, log, missing_ok=missing_ok), relative, log)
