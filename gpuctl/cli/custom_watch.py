"""One watch request on a cluster-scoped custom resource, for the CLI's commands that follow
objects (`gpuctl nodes -w`, `rollout status -w`, `node inspect --fresh`): its events as
(type, object), and its failures in words. A resourceVersion the server no longer keeps
(410 Gone) is `HistoryGoneError`, for the caller to list again and go on from there; any other
refusal or a connection that fails is a CommandError saying why."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import urllib3
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from gpuctl.cli.errors import CommandError
from gpuctl.cli.kube_errors import describe_api_error, unreachable
from gpuctl.common import names

GONE = 410


class HistoryGoneError(Exception):
    """The server no longer keeps the resourceVersion the watch started from."""


def watch_events(
    api: Any,
    plural: str,
    resource: str,
    server: str,
    *,
    resource_version: str | None,
    timeout_seconds: float | None,
    field_selector: str | None = None,
) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """The events of one watch of `plural` (CustomObjectsApi `api`; `resource` names it in
    errors) from `resource_version`,
    until the server ends it (after `timeout_seconds`; None: when it likes) or the caller
    stops reading."""
    kwargs: dict[str, Any] = {"resource_version": resource_version}
    if field_selector is not None:
        kwargs["field_selector"] = field_selector
    if timeout_seconds is not None:
        kwargs["timeout_seconds"] = max(1, int(timeout_seconds))
        kwargs["_request_timeout"] = timeout_seconds + 30
    stream = watch.Watch()  # type: ignore[no-untyped-call]
    try:
        for event in stream.stream(  # type: ignore[no-untyped-call]
            api.list_cluster_custom_object, names.GROUP, names.VERSION, plural, **kwargs
        ):
            obj = event.get("object")
            if isinstance(obj, Mapping):
                yield str(event.get("type") or ""), obj
    except ApiException as error:
        if error.status == GONE:
            raise HistoryGoneError from error
        raise CommandError(describe_api_error(error, "watch", resource, server)) from error
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise unreachable(server, error) from error
    finally:
        stream.stop()  # type: ignore[no-untyped-call]
