"""Whether xe put a GPU function in survivability mode: its firmware failed and needs a flash.

xe (drivers/gpu/drm/xe/xe_survivability_mode.c) creates `survivability_mode` under the PCI
device only while the device is in survivability mode, admin-readable, its first line
"Survivability mode type: Boot" (pcode reported a firmware boot failure at probe: the driver
bound with no DRM card, so firmware can be flashed) or "... Runtime" (a firmware error
wedged the device later), then "<name>: 0x<reg> - 0x<value>" lines. A device in it is bound
to xe and serves nothing: a load that ends there is a failed load, though the binding looks
restored.

Pure: the caller lists the device's directory and reads the file. Absent means not in it;
a directory that cannot be listed means unknown (None); a file that exists but cannot be
read, or whose first line is not one of the two, is survivability of an unknown type.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

SURVIVABILITY_FILE = "survivability_mode"
_TYPE_PREFIX = "Survivability mode type:"


class SurvivabilityMode(enum.Enum):
    NONE = "NONE"
    BOOT = "BOOT"
    RUNTIME = "RUNTIME"
    TYPE_UNKNOWN = "TYPE_UNKNOWN"


@dataclass(frozen=True, slots=True)
class Survivability:
    mode: SurvivabilityMode
    # The file's lines after the type line.
    details: tuple[str, ...] = ()


NOT_IN_SURVIVABILITY = Survivability(SurvivabilityMode.NONE)


def parse_survivability(text: str | None) -> Survivability:
    """The mode from the file's text (None: it exists but could not be read)."""
    if text is None:
        return Survivability(SurvivabilityMode.TYPE_UNKNOWN)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith(_TYPE_PREFIX):
        return Survivability(SurvivabilityMode.TYPE_UNKNOWN, tuple(lines))
    kind = lines[0].removeprefix(_TYPE_PREFIX).strip().upper()
    mode = {"BOOT": SurvivabilityMode.BOOT, "RUNTIME": SurvivabilityMode.RUNTIME}.get(
        kind, SurvivabilityMode.TYPE_UNKNOWN
    )
    return Survivability(mode, tuple(lines[1:]))
