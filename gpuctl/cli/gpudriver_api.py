"""GPUDriver objects and the rollout's node state, through the Kubernetes API.

Everything `gpuctl rollout` writes is an admin action the coordinator documents: pausing or
resuming (`spec.rollout.paused`, plus `gpuctl.dev/rollout-resumed-version` to release the hold
after the first node), undoing (`spec.kernelModule` from a recorded revision) and retrying a
node (its `gpuctl.dev/driver-state` back to Pending).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuctl.cli.custom_watch import HistoryGoneError, watch_events
from gpuctl.cli.errors import CommandError
from gpuctl.cli.kube_client import request_timeout
from gpuctl.cli.kube_errors import call_api, describe_api_error, is_missing_object, unreachable
from gpuctl.common import names

RETRYABLE_PHASES = (names.Phase.FAILED.value, names.Phase.BLOCKED.value)


# --dry-run's values, as kubectl's: none writes; client sends nothing; server sends the write
# with dryRun=All (admission, validation and RBAC run; nothing is stored).
DRY_RUN_CHOICES = ("none", "client", "server")


class NoSuchGpuDriverError(CommandError):
    """No GPUDriver of the name asked for."""


class GpuDriverApi:
    def __init__(self, api_client: Any, dry_run: str = "none") -> None:
        self._custom: Any = client.CustomObjectsApi(api_client)
        self._core: Any = client.CoreV1Api(api_client)
        self._server = str(api_client.configuration.host)
        self._timeout = request_timeout(api_client)
        self.dry_run = dry_run

    def _write_options(self) -> dict[str, Any]:
        """A write call's options: dryRun=All for --dry-run=server."""
        options: dict[str, Any] = {"_request_timeout": self._timeout}
        if self.dry_run == "server":
            options["dry_run"] = "All"
        return options

    def resolve(self, name: str | None) -> Mapping[str, Any]:
        """The named GPUDriver, or the only one in the cluster when no name is given."""
        if name is not None:
            return self.get(name)
        items = self.list_all()
        if len(items) == 1:
            return items[0]
        if not items:
            raise CommandError("there is no GPUDriver in this cluster")
        node_names = ", ".join(sorted(str(i["metadata"]["name"]) for i in items))
        raise CommandError(f"there are several GPUDrivers ({node_names}): name one")

    def list_all(self) -> list[Mapping[str, Any]]:
        """Every GPUDriver in the cluster."""
        listed = call_api(
            "list",
            names.GPUDRIVERS,
            self._server,
            lambda: self._custom.list_cluster_custom_object(
                names.GROUP, names.VERSION, names.GPUDRIVER_PLURAL, _request_timeout=self._timeout
            ),
        )
        items: list[Mapping[str, Any]] = listed.get("items", [])
        return items

    def find(self, name: str) -> Mapping[str, Any] | None:
        """The named GPUDriver, or None when there is none of that name."""
        try:
            return self.get(name)
        except NoSuchGpuDriverError:
            return None

    def get(self, name: str) -> Mapping[str, Any]:
        try:
            found: Mapping[str, Any] = self._custom.get_cluster_custom_object(
                names.GROUP,
                names.VERSION,
                names.GPUDRIVER_PLURAL,
                name,
                _request_timeout=self._timeout,
            )
        except ApiException as error:
            if is_missing_object(error, name):
                raise NoSuchGpuDriverError(f'no GPUDriver "{name}"') from error
            raise CommandError(
                describe_api_error(error, "get", names.GPUDRIVERS, self._server)
            ) from error
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise unreachable(self._server, error) from error
        return found

    def set_paused(self, name: str, *, paused: bool, resumed_version: str | None) -> None:
        body: dict[str, Any] = {"spec": {"rollout": {"paused": paused}}}
        if resumed_version is not None:
            body["metadata"] = {"annotations": {names.RESUMED_VERSION: resumed_version}}
        self.patch_driver(name, body)

    def patch_driver(self, name: str, body: Mapping[str, Any]) -> None:
        """A merge patch of the GPUDriver (a resourceVersion in it makes it conditional);
        none with --dry-run=client."""
        if self.dry_run == "client":
            return
        call_api(
            "patch",
            names.GPUDRIVERS,
            self._server,
            lambda: self._custom.patch_cluster_custom_object(
                names.GROUP,
                names.VERSION,
                names.GPUDRIVER_PLURAL,
                name,
                body,
                **self._write_options(),
            ),
        )

    def changes(self, name: str, timeout: float | None) -> Iterator[Mapping[str, Any]]:
        """The GPUDriver now, then every new version of it, until `timeout` (None: forever) or
        its deletion (its last version)."""
        current = self.get(name)
        yield current
        resource_version = current.get("metadata", {}).get("resourceVersion")
        while True:
            try:
                for kind, obj in watch_events(
                    self._custom,
                    names.GPUDRIVER_PLURAL,
                    names.GPUDRIVERS,
                    self._server,
                    resource_version=resource_version,
                    timeout_seconds=timeout,
                    field_selector=f"metadata.name={name}",
                ):
                    resource_version = obj.get("metadata", {}).get("resourceVersion")
                    yield obj
                    if kind == "DELETED":
                        return  # nothing comes after: never wait on for it
            except HistoryGoneError:
                current = self.get(name)  # our place in history is gone: start from now
                resource_version = current.get("metadata", {}).get("resourceVersion")
                yield current
                continue
            if timeout is not None:
                return

    def node_phase(self, node: str) -> str | None:
        """The rollout state a Node carries now (None: none, or the Node is gone)."""
        try:
            found: Any = self._core.read_node(node, _request_timeout=self._timeout)
        except ApiException as error:
            if error.status == 404:
                return None
            raise CommandError(describe_api_error(error, "get", "nodes", self._server)) from error
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise unreachable(self._server, error) from error
        return (found.metadata.labels or {}).get(names.STATE_LABEL)

    def retry_node(self, node: str, driver: str | None = None) -> str:
        """Put a Failed or Blocked node back to Pending; returns the phase it was in. With
        `driver`, a node another GPUDriver's rollout has (its TARGET_LABEL) is refused."""
        found: Any = call_api(
            "get",
            "nodes",
            self._server,
            lambda: self._core.read_node(node, _request_timeout=self._timeout),
        )
        labels = found.metadata.labels or {}
        phase = labels.get(names.STATE_LABEL)
        other = labels.get(names.TARGET_LABEL)
        if driver is not None and other and other != driver:
            raise CommandError(
                f'node "{node}" is in the rollout of GPUDriver "{other}", not "{driver}"'
            )
        if phase not in RETRYABLE_PHASES:
            raise CommandError(
                f'node "{node}" is {phase or "not in a rollout"}: only a Failed or Blocked node '
                "can be retried"
            )
        body = {
            "metadata": {
                "labels": {names.STATE_LABEL: names.Phase.PENDING.value},
                "annotations": {names.REASON: None},
                "resourceVersion": found.metadata.resource_version,
            }
        }
        if self.dry_run != "client":
            call_api(
                "patch",
                "nodes",
                self._server,
                lambda: self._core.patch_node(node, body, **self._write_options()),
            )
        return str(phase)
