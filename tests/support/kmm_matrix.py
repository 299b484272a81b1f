"""Which KMM versions a test runs against.

Every integration test runs against KMM v2.6.0 (the ``kmm_version`` fixture's default). The
tests that show docs/kmm-unloads.md's trigger table and one whole rollout are also run against KMM's
main branch (de3f8c9) by marking them ``@EACH_KMM``: a change in KMM's unload paths on main
shows up there before it is released.
"""

from __future__ import annotations

import pytest

from testbed.harness.kmm_build import DEFAULT_VERSION, MAIN_VERSION

EACH_KMM = pytest.mark.parametrize("kmm_version", [DEFAULT_VERSION, MAIN_VERSION])
