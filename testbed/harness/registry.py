"""A real OCI registry on loopback for tests: the CNCF distribution registry (``registry``, built
by ``hack/registry/ensure``), serving HTTPS with a certificate from a throwaway test CA
(testbed/harness/certs.py) and asking for a user and password (htpasswd, bcrypt: the only hash
it reads), so a test proves pushes and pulls with credentials and TLS verified, as a user's
registry asks for them.

``find_registry`` takes ``GPUCTL_REGISTRY`` (set by ``hack/test``) or runs
``hack/registry/ensure``. ``running_registry`` writes the CA, the serving pair, the htpasswd file
and the config under a folder, starts the registry in its own process group
(testbed/harness/processes.py) and returns once ``/v2/`` answers over verified TLS.
"""

from __future__ import annotations

import base64
import datetime
import os
import secrets
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import yaml

from testbed.harness import certs
from testbed.harness.layout import LOOPBACK
from testbed.harness.ports import free_loopback_ports
from testbed.harness.processes import start_in_own_group, stop_child
from testbed.harness.waiting import wait_until

REGISTRY_ENV = "GPUCTL_REGISTRY"
USER = "gpuctl-release"
REALM = "gpuctl-test-registry"
START_SECONDS = 60.0


class MissingRegistryError(RuntimeError):
    """The registry binary is not there and could not be built."""


@dataclass(frozen=True)
class Registry:
    """A running registry: ``host`` (``127.0.0.1:PORT``, what image references and
    ``oci://`` URLs start with), the CA that signed its certificate (``ca_file``, and
    ``cert_dir`` holding it as containers/image's ``--cert-dir`` wants), the one user's
    credentials, and its log."""

    host: str
    ca_file: Path
    cert_dir: Path
    user: str
    password: str
    log: Path

    def tls(self) -> ssl.SSLContext:
        """A client context trusting only the test CA."""
        return ssl.create_default_context(cafile=str(self.ca_file))

    def get(
        self,
        path: str,
        *,
        password: str | None = None,
        anonymous: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Mapping[str, str], bytes]:
        """``GET https://host{path}`` as the user (with ``password``, default the right one) or
        with no credentials (``anonymous``): the status, the headers and the body, errors
        included."""
        sent = dict(headers or {})
        if not anonymous:
            token = f"{self.user}:{self.password if password is None else password}".encode()
            sent["Authorization"] = f"Basic {base64.b64encode(token).decode()}"
        request = urllib.request.Request(f"https://{self.host}{path}", headers=sent)
        try:
            # https only, to loopback: the URL is built just above.
            with urllib.request.urlopen(request, context=self.tls(), timeout=30) as response:  # noqa: S310
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as refused:
            return refused.code, dict(refused.headers), refused.read()


def find_registry(repo_root: Path, environ: Mapping[str, str]) -> Path:
    """The registry binary from ``GPUCTL_REGISTRY`` or from ``hack/registry/ensure``."""
    named = environ.get(REGISTRY_ENV, "")
    if named:
        if not os.access(named, os.X_OK):
            raise MissingRegistryError(f"{REGISTRY_ENV}={named} is not an executable file")
        return Path(named)
    ensure = repo_root / "hack" / "registry" / "ensure"
    result = subprocess.run(
        [str(ensure)], stdout=subprocess.PIPE, text=True, check=False, env=dict(environ)
    )
    if result.returncode != 0:
        raise MissingRegistryError(
            f"{ensure} failed (exit {result.returncode}); its messages are above. "
            "It builds the distribution registry with Go from the module proxy."
        )
    return Path(result.stdout.strip())


def _write_private(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def _config(folder: Path, port: int) -> dict[str, object]:
    return {
        "version": 0.1,
        "log": {"level": "info", "formatter": "text"},
        "storage": {"filesystem": {"rootdirectory": str(folder / "storage")}},
        "http": {
            "addr": f"{LOOPBACK}:{port}",
            "secret": secrets.token_hex(16),
            "tls": {
                "certificate": str(folder / "tls.crt"),
                "key": str(folder / "tls.key"),
            },
        },
        "auth": {"htpasswd": {"realm": REALM, "path": str(folder / "htpasswd")}},
    }


@contextmanager
def running_registry(folder: Path, binary: Path) -> Iterator[Registry]:
    """A registry serving ``https://127.0.0.1:PORT`` from ``folder`` until the block ends."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca = certs.make_ca(now, "gpuctl-registry-test-ca")
    serving = certs.make_serving_cert(ca, now)
    cert_dir = folder / "certs.d"
    cert_dir.mkdir(exist_ok=True)
    ca_file = cert_dir / "ca.crt"  # containers/image reads every *.crt in --cert-dir as a CA
    ca_file.write_bytes(ca.cert_pem)
    (folder / "tls.crt").write_bytes(serving.cert_pem)
    _write_private(folder / "tls.key", serving.key_pem)
    password = secrets.token_urlsafe(18)
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt()).decode()
    _write_private(folder / "htpasswd", f"{USER}:{hashed}\n".encode())
    [port] = free_loopback_ports(1)
    config = folder / "config.yml"
    config.write_text(yaml.safe_dump(_config(folder, port)))
    log = folder / "registry.log"
    # No OpenTelemetry exporter: its default (OTLP to localhost:4318) has nothing to talk to.
    environ = {"PATH": os.environ.get("PATH", ""), "OTEL_TRACES_EXPORTER": "none"}
    process = start_in_own_group(
        [str(binary), "serve", str(config)], log, die_with_parent=True, environ=environ
    )
    registry = Registry(f"{LOOPBACK}:{port}", ca_file, cert_dir, USER, password, log)
    try:

        def answers() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"the registry exited {process.returncode}: {log.read_text()}")
            try:
                status, _, _ = registry.get("/v2/")
            except OSError:
                return False
            return status == 200

        wait_until(f"the registry answers on https://{registry.host}/v2/", answers, START_SECONDS)
        yield registry
    finally:
        stop_child(process)
