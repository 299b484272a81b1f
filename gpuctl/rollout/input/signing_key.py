"""Will a node that enforces module signatures trust the key KMM signs the target with? (pure)

KMM signs the target's modules with the key and certificate of the `sign` it picks for the
node's kernel: the module-wide one, with the mapping's certSecret, keySecret and
unsignedImage in its place where the mapping gives them (KMM's getRelevantSign). A kernel
enforcing signatures (Secure Boot with lockdown, or module.sig_enforce) loads the result
only when that key is one it trusts; otherwise the load is refused after KMM unloaded the
old driver. So before the unload the preflight compares the certificate's identity (its
issuer's name and serial, as modinfo names a module's signer: module_signature.py) with
what the node's agent says the kernel trusts:

- the keys the kernel verifies modules with, as gpuctl/rollout/input/node_keys.py judges them from
  the agent's report: MOK keys (MokListRT) and db keys where the kernel's keyrings make them verify
  modules, and the key the node's loaded module was verified with (no `E` taint): a key in
  the kernel's built-in keyring shows only that way.

The certificate is read from its Secret (KMM's data key `cert`, PEM) by the caller; what
could not be read, or a node whose trusted keys cannot be read, is unknown, and unknown
blocks: never taken as trusted. rollout.trustImageSignatures (the admin vouches) skips this.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.common.module_signature import (
    SignatureFacts,
    SignatureFormatError,
    certificate_identity,
)
from gpuctl.gpudriver.targeting import mapping_for
from gpuctl.rollout.input.node_keys import KeyTrust, judge_key

CERT_DATA_KEY = "cert"  # KMM's data key of the certSecret (constants.PublicSignDataKey)
_PEM = re.compile(
    rb"-----BEGIN CERTIFICATE-----\s*(?P<body>[A-Za-z0-9+/=\s]+?)\s*-----END CERTIFICATE-----"
)


@dataclass(frozen=True)
class SigningCertificate:
    """A certSecret as read: the certificate's identity, or why it is unknown."""

    secret: str  # "<namespace>/<name>"
    identity: SignatureFacts | None = None
    problem: str = ""

    def words(self) -> str:
        """The key in an admin's words: "'CN' (serial 5B:0A, Secret ns/name)"."""
        if self.identity is None:
            return f"the key of Secret {self.secret}"
        who = self.identity
        return f"'{who.signer}' (serial {who.key_id}, Secret {self.secret})"


def certificate_of(
    secret_ref: str, secret: Mapping[str, Any] | None, problem: str = ""
) -> SigningCertificate:
    """The certificate in Secret `secret_ref` as read (None: not found, or `problem` says why
    it could not be read)."""
    if secret is None:
        return SigningCertificate(secret_ref, problem=problem or f"Secret {secret_ref} not found")
    encoded = (secret.get("data") or {}).get(CERT_DATA_KEY)
    if not encoded:
        return SigningCertificate(
            secret_ref, problem=f"Secret {secret_ref} has no data key `{CERT_DATA_KEY}`"
        )
    try:
        raw = base64.b64decode(str(encoded), validate=True)
        pem = _PEM.search(raw)
        der = base64.b64decode(b"".join(pem["body"].split()), validate=True) if pem else raw
        identity = certificate_identity(der)
    except (binascii.Error, SignatureFormatError) as error:
        return SigningCertificate(
            secret_ref,
            problem=f"`{CERT_DATA_KEY}` of Secret {secret_ref} is not a PEM certificate: {error}",
        )
    return SigningCertificate(secret_ref, identity)


def _cert_secret(sign: Mapping[str, Any] | None) -> str:
    return str(((sign or {}).get("certSecret") or {}).get("name") or "")


def cert_secret_for(kernel_module: Mapping[str, Any], kernel: str) -> str:
    """The certSecret KMM signs the target for `kernel` with ("" when it signs nothing):
    the mapping's (the first whose regexp matches) where it names one, else the module's."""
    mapping = mapping_for(kernel, kernel_module.get("kernelMappings") or []) or {}
    return _cert_secret(mapping.get("sign")) or _cert_secret(kernel_module.get("sign"))


def cert_secrets(kernel_module: Mapping[str, Any]) -> list[str]:
    """Every certSecret the spec names, each once: what the caller reads."""
    signs = [kernel_module.get("sign")]
    signs += [m.get("sign") for m in kernel_module.get("kernelMappings") or []]
    return sorted({name for name in map(_cert_secret, signs) if name})


def untrusted_words(report: pb.NodeReport, certificate: SigningCertificate) -> str:
    """Why the node would refuse the signed target ("" when it trusts the key;
    gpuctl/rollout/input/node_keys.py)."""
    if certificate.identity is None:
        return (
            f"cannot tell whether the node trusts the key KMM signs the target with: "
            f"{certificate.problem}"
        )
    verdict = judge_key(report, certificate.identity)
    key = certificate.words()
    if verdict.trust is KeyTrust.TRUSTED:
        return ""
    if verdict.trust is KeyTrust.UNKNOWN:
        return f"cannot tell whether the node trusts {key}: {verdict.words}"
    return f"KMM signs the target with {key}, which the node does not trust: {verdict.words}"
