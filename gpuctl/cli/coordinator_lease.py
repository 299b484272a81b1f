"""Which Lease is the coordinator's, for `gpuctl version` and `gpuctl support-bundle`.

The chart names the coordinator's leader-election Lease `<release fullname>-coordinator`:
`gpuctl-coordinator` for a release named `gpuctl`, another name for any other release. Asked
for none (`--lease`), the CLI reads that default first; when it is missing, it lists the
namespace's Leases and takes the one a gpuctl coordinator annotated with its version
(names.COORDINATOR_VERSION), so a release of another name is found without a flag. Several
such Leases (two releases in one namespace) are an error naming them; a list the caller may
not make (the chart's view role grants `get` of its own Lease only) leaves the default, and
the error the read of it gives says to name the Lease.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuctl.cli.errors import CommandError
from gpuctl.cli.kube_client import request_timeout
from gpuctl.cli.kube_errors import call_api
from gpuctl.common import names


def annotated_leases(leases: Sequence[Mapping[str, Any]]) -> list[str]:
    """The names of the Leases a gpuctl coordinator wrote its version on, sorted (pure)."""
    found = []
    for lease in leases:
        meta = lease.get("metadata") or {}
        if names.COORDINATOR_VERSION in (meta.get("annotations") or {}):
            found.append(str(meta.get("name")))
    return sorted(found)


def chosen_lease(namespace: str, leases: Sequence[Mapping[str, Any]]) -> str:
    """The coordinator's Lease among `leases` of `namespace` where the default is missing
    (pure): the one annotated, else the default (its read says it is missing)."""
    found = annotated_leases(leases)
    if len(found) > 1:
        raise CommandError(
            f"several gpuctl coordinators' Leases in namespace {namespace}: "
            f"{', '.join(found)}; name one with --lease"
        )
    return found[0] if found else names.DEFAULT_COORDINATOR_LEASE


def find_lease(api_client: Any, namespace: str, asked: str | None) -> str:
    """The Lease to read: `asked`, or the default when it exists, or the one listed."""
    if asked:
        return asked
    api: Any = client.CoordinationV1Api(api_client)
    timeout = request_timeout(api_client)
    server = str(api_client.configuration.host)
    default = names.DEFAULT_COORDINATOR_LEASE

    def default_exists() -> bool:
        try:
            api.read_namespaced_lease(default, namespace, _request_timeout=timeout)
        except ApiException as err:
            if err.status in (403, 404):  # not there, or not ours to read: look further
                return False
            raise
        return True

    def listed() -> list[dict[str, Any]]:
        try:
            answer = api.list_namespaced_lease(namespace, _request_timeout=timeout)
        except ApiException as err:
            if err.status == 403:  # the view role's get of one Lease: no list to choose from
                return []
            raise
        return [item.to_dict() for item in answer.items]

    if call_api("get", f"lease {namespace}/{default}", server, default_exists):
        return default
    return chosen_lease(namespace, call_api("list", f"leases in {namespace}", server, listed))
