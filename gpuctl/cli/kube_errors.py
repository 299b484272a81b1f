"""Kubernetes API failures in words a person can act on, for every command that uses the API."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException

from gpuctl.cli.errors import CommandError

T = TypeVar("T")


def status_body(error: ApiException) -> Mapping[str, Any]:
    """The API's Status object carried by `error`, or {} when the body is not one."""
    try:
        body = json.loads(error.body or "")
    except ValueError:
        return {}
    return body if isinstance(body, Mapping) else {}


def status_details(error: ApiException) -> Mapping[str, Any]:
    """`details` of the Status: it names the object for "that object is not found", and is
    empty for "that whole resource type is not served"."""
    details = status_body(error).get("details")
    return details if isinstance(details, Mapping) else {}


def is_missing_object(error: ApiException, name: str) -> bool:
    return error.status == 404 and status_details(error).get("name") == name


def describe_api_error(error: ApiException, verb: str, resource: str, server: str) -> str:
    reason = str(status_body(error).get("message") or error.reason or error.status)
    if error.status == 401:
        return f"the Kubernetes API at {server} did not accept your credentials"
    if error.status == 403:
        return f"you are not allowed to {verb} {resource}: {reason}"
    if error.status == 404:
        return (
            f"the {resource} API is not installed in this cluster "
            "(install the gpuctl chart), or the object is gone"
        )
    return f"the Kubernetes API refused to {verb} {resource}: {reason}"


def unreachable(server: str, error: Exception) -> CommandError:
    return CommandError(f"cannot reach the Kubernetes API at {server}: {error}")


def call_api(verb: str, resource: str, server: str, action: Callable[[], T]) -> T:
    """Run one API call; any failure becomes a CommandError with a clear reason."""
    try:
        return action()
    except ApiException as error:
        raise CommandError(describe_api_error(error, verb, resource, server)) from error
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise unreachable(server, error) from error
