"""The certSecrets a GPUDriver names, read for the preflight's signing-key check.

A node that enforces module signatures loads the target only when it trusts the key KMM
signs with (gpuctl/rollout/input/signing_key.py). The key's certificate is in the Secret the
GPUDriver's `sign.certSecret` names, in the coordinator's namespace; the coordinator reads
that Secret (only those named: the chart grants `get` on the names listed in
coordinator.signingCertificateSecrets, never on Secrets at large, and never the keySecret).
Each answer is kept for CERTIFICATE_TTL_SECONDS: passes come often, certificates rarely
change. A Secret that cannot be read is a problem in words (forbidden: which chart value
allows it), which the preflight takes as "cannot tell", never as trusted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from http import HTTPStatus

from coordinator.kube.client import KubeApi, KubeError, path
from gpuctl.rollout.input.signing_key import SigningCertificate, certificate_of

log = logging.getLogger(__name__)

CERTIFICATE_TTL_SECONDS = 30.0
CHART_VALUE = "coordinator.signingCertificateSecrets"


class SigningCertificates:
    """Reads certSecrets by name, each at most once per CERTIFICATE_TTL_SECONDS."""

    def __init__(self, kube: KubeApi, monotonic: Callable[[], float]) -> None:
        self._kube = kube
        self._monotonic = monotonic
        self._read: dict[tuple[str, str], tuple[float, SigningCertificate]] = {}

    def read(self, namespace: str, secrets: Sequence[str]) -> dict[str, SigningCertificate]:
        """The certificates of `secrets` (names in `namespace`), by name."""
        return {name: self._one(namespace, name) for name in secrets}

    def _one(self, namespace: str, name: str) -> SigningCertificate:
        now = self._monotonic()
        cached = self._read.get((namespace, name))
        if cached is not None and now - cached[0] < CERTIFICATE_TTL_SECONDS:
            return cached[1]
        ref = f"{namespace}/{name}"
        try:
            secret = self._kube.request(
                "GET", path("", "v1", "secrets", namespace=namespace, name=name)
            )
            found = certificate_of(ref, secret)
        except KubeError as err:
            found = certificate_of(ref, None, _problem(ref, err))
        if found.problem and (cached is None or cached[1].problem != found.problem):
            log.warning("signing certificate unknown", extra={"secret": ref, "why": found.problem})
        self._read[(namespace, name)] = (now, found)
        return found


def _problem(ref: str, err: KubeError) -> str:
    if err.not_found:
        return f"Secret {ref} not found"
    if err.status == HTTPStatus.FORBIDDEN:
        return (
            f"the coordinator may not read Secret {ref}: list its name in the chart's {CHART_VALUE}"
        )
    return f"Secret {ref} could not be read: {err}"
