"""Kubernetes API failures in words a person can act on, for every command that uses the API."""

from __future__ import annotations

import json
import re
import socket
import ssl
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

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


_TIMEOUT = re.compile(r"\((?:read|connect) timeout=[^)]*\)")


def _root(error: BaseException) -> BaseException:
    """The innermost cause: urllib3 wraps the socket's error in a retry error's `reason`."""
    seen = {id(error)}
    while True:
        inner = getattr(error, "reason", None)
        if not isinstance(inner, BaseException):
            inner = error.__cause__ or error.__context__
        if inner is None or id(inner) in seen:
            return error
        seen.add(id(inner))
        error = inner


def _root_of_kind(error: BaseException) -> BaseException | None:
    """The retry error's `reason` (urllib3's own error), if any."""
    reason = getattr(error, "reason", None)
    return reason if isinstance(reason, BaseException) else None


def unreachable(server: str, error: Exception) -> CommandError:
    """A connection that failed, in one line as kubectl says it, never urllib3's text."""
    where = urlsplit(server).netloc or server
    text, root = str(error), _root(error)
    timeout = _TIMEOUT.search(text)
    # urllib3's NewConnectionError (and NameResolutionError) is a ConnectTimeoutError too.
    timed_out = isinstance(root, (TimeoutError, urllib3.exceptions.TimeoutError)) and not (
        isinstance(root, urllib3.exceptions.NewConnectionError)
    )
    if isinstance(root, ConnectionRefusedError) or "Connection refused" in text:
        words = f"the connection to the server {where} was refused: is the kubeconfig right?"
    elif isinstance(root, socket.gaierror) or isinstance(
        _root_of_kind(error), urllib3.exceptions.NameResolutionError
    ):
        words = f"the server name in {where} does not resolve: is the kubeconfig right?"
    elif timeout or timed_out:
        after = f" {timeout.group(0)}" if timeout else ""
        words = (
            f"the server {where} did not answer in time{after}: is it up and reachable "
            "(--request-timeout waits longer)?"
        )
    elif isinstance(root, (ssl.SSLError, urllib3.exceptions.SSLError)):
        words = (
            f"the server {where} failed TLS ({root}): is the kubeconfig's "
            "certificate-authority the cluster's?"
        )
    else:
        words = f"cannot reach the Kubernetes API at {server}: {type(root).__name__}: {root}"
    return CommandError(words)


def call_api(verb: str, resource: str, server: str, action: Callable[[], T]) -> T:
    """Run one API call; any failure becomes a CommandError with a clear reason."""
    try:
        return action()
    except ApiException as error:
        raise CommandError(describe_api_error(error, verb, resource, server)) from error
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise unreachable(server, error) from error
