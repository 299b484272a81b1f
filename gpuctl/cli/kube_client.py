"""A Kubernetes API client from the user's kubeconfig, with errors a person can act on."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kubernetes import client, config

from gpuctl.cli.errors import CommandError

# How long one API request may take (--request-timeout), unless the command says otherwise.
DEFAULT_REQUEST_TIMEOUT = 20.0
_TIMEOUT_ATTRIBUTE = "gpuctl_request_timeout"


def request_timeout(api_client: Any) -> float:
    """The --request-timeout the client was made with, for each call's `_request_timeout`."""
    return float(getattr(api_client, _TIMEOUT_ATTRIBUTE, DEFAULT_REQUEST_TIMEOUT))


def load_api_client(
    kubeconfig: str | None,
    context: str | None,
    timeout: float = DEFAULT_REQUEST_TIMEOUT,
    *,
    or_else: str = "",
) -> Any:
    """`--kubeconfig`, else $KUBECONFIG, else ~/.kube/config, else the in-cluster account;
    every request made through it may take `timeout` seconds (request_timeout()). `or_else`:
    the command's other way in, said when there is no kubeconfig ("or use --coordinator ADDR")."""
    api_client = _load(kubeconfig, context, or_else)
    setattr(api_client, _TIMEOUT_ATTRIBUTE, timeout)
    return api_client


def _load(kubeconfig: str | None, context: str | None, or_else: str) -> Any:
    path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    explicit = kubeconfig is not None or "KUBECONFIG" in os.environ
    if not explicit and not Path(path).exists() and "KUBERNETES_SERVICE_HOST" in os.environ:
        configuration = client.Configuration()
        config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration
        )
        return client.ApiClient(configuration)
    first = path.split(os.pathsep)[0]
    if not Path(first).exists():
        ways = "pass --kubeconfig FILE, " + (
            f"set KUBECONFIG, {or_else}" if or_else else "or set KUBECONFIG"
        )
        raise CommandError(f"no kubeconfig at {first}: {ways}")
    try:
        return config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=path, context=context
        )
    except (config.ConfigException, OSError, ValueError) as error:
        raise CommandError(f"cannot use kubeconfig {path}: {error}") from error
