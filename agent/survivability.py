"""Whether xe put a GPU function in survivability mode: its firmware failed and needs a flash.

xe (drivers/gpu/drm/xe/xe_survivability_mode.c) creates `survivability_mode` under the PCI
device only while the device is in survivability mode, admin-readable: Boot (pcode reported a
firmware boot failure at probe: the driver bound with no DRM card, so firmware can be
flashed) or Runtime (a firmware error wedged the device later). Its `survivability_mode_show`
prints, by kernel:

- older: "Survivability mode type: Boot" (or "... Runtime"), then "<name>: 0x<reg> -
  0x<value>" lines;
- newer: only "Boot" or "Runtime"; the details are files of the device's
  `survivability_info/` group (capability_info, postcode_trace, aux_info<n>: "0x<value>";
  fdo_mode: "enabled"/"disabled"), read as "<file>: <value>" lines.

A device in it is bound to xe and serves nothing: a load that ends there is a failed load,
though the binding looks restored.

Pure: the caller lists the device's directory and reads the files. Absent means not in it;
a directory that cannot be listed means unknown (None); a file that exists but cannot be
read, or whose first line is neither form, is survivability of an unknown type.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

SURVIVABILITY_FILE = "survivability_mode"
SURVIVABILITY_INFO_DIR = "survivability_info"
_TYPE_PREFIX = "Survivability mode type:"
_MODES = {"BOOT": "BOOT", "RUNTIME": "RUNTIME"}


class SurvivabilityMode(enum.Enum):
    NONE = "NONE"
    BOOT = "BOOT"
    RUNTIME = "RUNTIME"
    TYPE_UNKNOWN = "TYPE_UNKNOWN"


@dataclass(frozen=True, slots=True)
class Survivability:
    mode: SurvivabilityMode
    # The file's lines after the type line, then survivability_info/'s files (newer xe).
    details: tuple[str, ...] = ()


NOT_IN_SURVIVABILITY = Survivability(SurvivabilityMode.NONE)


def parse_survivability(text: str | None) -> Survivability:
    """The mode from the file's text (None: it exists but could not be read)."""
    if text is None:
        return Survivability(SurvivabilityMode.TYPE_UNKNOWN)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return Survivability(SurvivabilityMode.TYPE_UNKNOWN)
    kind = lines[0].removeprefix(_TYPE_PREFIX).strip().upper()
    if kind not in _MODES:
        return Survivability(SurvivabilityMode.TYPE_UNKNOWN, tuple(lines))
    return Survivability(SurvivabilityMode(_MODES[kind]), tuple(lines[1:]))


def with_info(found: Survivability, info: dict[str, str | None]) -> Survivability:
    """`found` with the `survivability_info/` files (name -> text, None: unreadable) as
    details, in name order."""
    details = [
        f"{name}: {'(unreadable)' if text is None else text.strip()}"
        for name, text in sorted(info.items())
    ]
    return Survivability(found.mode, found.details + tuple(details))
