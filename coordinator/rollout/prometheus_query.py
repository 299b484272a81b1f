"""Ask a Prometheus gate's server one query over HTTP(S): `GET <url>/api/v1/query?query=...`,
with a bearer token and a CA bundle when the coordinator is given them.

An authenticated Prometheus (OpenShift's thanos-querier behind kube-rbac-proxy, a Prometheus
behind an OAuth or TLS proxy) wants `Authorization: Bearer <token>` and serves a certificate
from a private CA. The coordinator's `--prometheus-token-file` and `--prometheus-ca-file` name
files the chart mounts (a projected ServiceAccount token the kubelet rotates, or a Secret's
key; a ConfigMap's or Secret's CA bundle); both are read at every query, so a rotated token or
CA is used from the next query on. The token is never sent over plain http. Whatever goes
wrong comes back as words in `QueryAnswer.error`; the pure `prometheus.gate_result`
decides what an answer means (anything but an empty result holds the rollout).
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from coordinator.rollout.config import PrometheusAccess
from gpuctl.rollout.input.prometheus import MAX_ANSWER_BYTES


@dataclass(frozen=True)
class QueryAnswer:
    """The HTTP status and body of an answer, or (status None) why there was none."""

    status: int | None
    body: bytes = b""
    error: str = ""


def _token(access: PrometheusAccess, url: str) -> tuple[str, str]:
    """(the bearer token, "") or ("", why it cannot be sent)."""
    if access.token_file is None:
        return "", ""
    if urllib.parse.urlsplit(url).scheme != "https":
        return "", (
            f"not sending the bearer token of --prometheus-token-file over plain http to "
            f"{url}: use an https:// url"
        )
    try:
        token = access.token_file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        return "", f"cannot read the Prometheus token file {access.token_file}: {error}"
    if not token:
        return "", f"the Prometheus token file {access.token_file} is empty"
    return token, ""


def _tls_context(access: PrometheusAccess) -> tuple[ssl.SSLContext | None, str]:
    """(a context verifying with --prometheus-ca-file, "") or (None, why it cannot)."""
    if access.ca_file is None:
        return ssl.create_default_context(), ""
    try:
        return ssl.create_default_context(cafile=str(access.ca_file)), ""
    except (OSError, ssl.SSLError) as error:
        return None, f"cannot use the Prometheus CA file {access.ca_file}: {error}"


def query_prometheus(
    access: PrometheusAccess, base_url: str, query: str, timeout: float
) -> QueryAnswer:
    """Asks `base_url`'s HTTP API for `query`, at most MAX_ANSWER_BYTES of the answer read."""
    url = f"{base_url}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    token, refused = _token(access, base_url)
    if refused:
        return QueryAnswer(None, error=refused)
    context, refused = _tls_context(access)
    if refused:
        return QueryAnswer(None, error=refused)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 (http(s) only: the CRD)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as answer:  # noqa: S310
            return QueryAnswer(answer.status, answer.read(MAX_ANSWER_BYTES))
    except urllib.error.HTTPError as err:
        return QueryAnswer(err.code, err.read(MAX_ANSWER_BYTES))
    except (urllib.error.URLError, OSError, ValueError) as err:
        return QueryAnswer(None, error=str(getattr(err, "reason", "") or err))
