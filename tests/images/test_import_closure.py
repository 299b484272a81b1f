"""Each part imports only what its image holds: every module of `agent` (and of `coordinator`)
imported in a fresh interpreter loads third-party code from the distributions its lock pins,
and the agent never loads the kubernetes client."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.images.locked import REPO, normalize, pins

# Imports every module of the package, then prints the distributions the top-level modules it
# loaded come from (the standard library and the checkout's own packages have none). What the
# interpreter loaded before (site's .pth hooks of the dev venv) is not the package's doing.
_LOADED_DISTRIBUTIONS = """
import importlib, importlib.metadata, json, pkgutil, sys
before = {name.split(".")[0] for name in sys.modules}
package = importlib.import_module(sys.argv[1])
for module in pkgutil.walk_packages(package.__path__, sys.argv[1] + "."):
    importlib.import_module(module.name)
owners = importlib.metadata.packages_distributions()
own = {"agent", "coordinator", "gpuctl"}
tops = {name.split(".")[0] for name in sys.modules} - own - before
print(json.dumps({
    "distributions": sorted({d for top in tops for d in owners.get(top, [])}),
    "modules": sorted(tops),
}))
"""


def loaded_by(package: str) -> dict[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _LOADED_DISTRIBUTIONS, package],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    loaded: dict[str, list[str]] = json.loads(done.stdout)
    return loaded


# grpc_tools is a dev tool that grpcio loads when it is installed (grpc._runtime_protos tries it);
# bcrypt, the test registry's htpasswd hashes (testbed/harness/registry.py), is one that
# cryptography's ssh serialization loads when it is installed (and goes without otherwise).
# The images hold neither and need neither.
OPTIONAL = {"grpcio-tools", "bcrypt"}


@pytest.mark.parametrize("package", ["agent", "coordinator"])
def test_every_module_loads_only_locked_distributions(package: str) -> None:
    locked = set(pins(REPO / "requirements" / f"{package}.txt"))
    loaded = {normalize(d) for d in loaded_by(package)["distributions"]} - OPTIONAL
    assert loaded, "no third-party distribution loaded: the scan is broken"
    assert loaded <= locked, f"{package} imports {sorted(loaded - locked)}, not in its lock"


def test_the_agent_never_loads_the_kubernetes_client() -> None:
    loaded = loaded_by("agent")
    assert "grpc" in loaded["modules"]  # the scan sees the agent's real dependencies
    assert "kubernetes" not in loaded["modules"]
    assert "kubernetes" not in pins(REPO / "requirements" / "agent.txt")
