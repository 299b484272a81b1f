"""Which KMM versions a test runs against.

Every integration test runs against KMM v2.6.0 (the ``kmm_version`` fixture's default). One
test per way KMM itself unloads or reloads a node (a row of docs/kmm-unloads.md whose trigger
is KMM's code: a version label, a config change, a selector, a taint, mapping loss, a missing
version label, a first load, a Module deleted, a write taken off mid-load, a device opened
after the check, an image without the kernel, a NodeModulesConfig deleted, an unloader never
cancelled, signing) is also run against KMM's main branch (de3f8c9) by marking it
``@EACH_KMM``: a change in KMM's unload paths on main shows up there before it is released.
What is gpuctl's own (its admission guards, a refused rollout, the agent's reports) runs once.
"""

from __future__ import annotations

import pytest

from testbed.harness.kmm_build import DEFAULT_VERSION, MAIN_VERSION

EACH_KMM = pytest.mark.parametrize("kmm_version", [DEFAULT_VERSION, MAIN_VERSION])
