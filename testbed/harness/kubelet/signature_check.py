"""The fake kernel's module signature check: what ``init_module`` decides about a module's
appended signature on a node's fake host root, as kernel/module/signing.c (module_sig_check)
decides it.

What the node's root says about its kernel, where testbed/fakehost writes it:

- ``sys/module/module/parameters/sig_enforce`` (``Y``/``N``): the kernel has module signing
  (CONFIG_MODULE_SIG); absent, it checks nothing and taints nothing;
- ``sys/kernel/security/lockdown`` with ``[integrity]`` or ``[confidentiality]`` selected:
  lockdown refuses what signing would only taint (LOCKDOWN_MODULE_SIGNATURE);
- the keys it trusts: the certificates enrolled with shim (the ``MokListRT`` EFI variable, EFI
  signature lists after 4 attribute bytes) and its built-in keys (``BUILTIN_KEYS``, a file of
  ``<signer>\\t<key id>[\\t<certificate, base64 DER>]`` lines that ``trust_builtin_key``
  writes; a line without a certificate trusts the name alone).

A module whose file ends in sign-file's magic names its key by issuer and serial
(gpuctl.common.module_signature.read_signature); a trusted key with its certificate is also
checked cryptographically (RSA PKCS#1 v1.5 over the module's bytes, as sign-file's PKCS#7
without signed attributes signs them). Then, as module_sig_check does:

- verified: the module loads without the ``E`` taint;
- an unreadable signature (EBADMSG) or one that does not verify (EKEYREJECTED): refused, even
  by a kernel that does not enforce;
- unsigned (ENODATA), or signed with a key the kernel does not have (ENOKEY): refused with
  EKEYREJECTED ("Key was rejected by service") when ``sig_enforce`` is Y, else with EPERM
  ("Operation not permitted") under lockdown, else loaded with the ``E`` taint.
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
from dataclasses import dataclass
from pathlib import Path

from agent.efi_signature_list import EfiListError, x509_certificates
from gpuctl.common.module_signature import (
    MAGIC,
    SignatureFacts,
    SignatureFormatError,
    certificate_identity,
    read_signature,
)

SIG_ENFORCE = "sys/module/module/parameters/sig_enforce"
LOCKDOWN = "sys/kernel/security/lockdown"
SHIM_GUID = "605dab50-e046-4300-abb6-3dd810dd8b23"
MOK_LIST_RT = f"sys/firmware/efi/efivars/MokListRT-{SHIM_GUID}"
BUILTIN_KEYS = "fake-kernel/builtin-keys"
LOCKED_DOWN = ("integrity", "confidentiality")

_EFI_ATTRIBUTES = 4
_SIGNATURE_INFO = 12  # struct module_signature, before the magic
_NOT_FATAL = (errno.ENODATA, errno.ENOPKG, errno.ENOKEY)


@dataclass(frozen=True)
class TrustedKey:
    """A key the kernel verifies modules with: its identity, and its certificate (DER) when
    known (None: trusted by name alone)."""

    identity: SignatureFacts
    certificate: bytes | None


@dataclass(frozen=True)
class Verdict:
    """What ``init_module`` makes of a module's signature: ``refused`` (errno's words), or
    loaded, ``unverified`` (the ``E`` taint, TAINT_UNSIGNED_MODULE) or not."""

    unverified: bool = False
    refused: str = ""


class KernelStateError(ValueError):
    """The root says something of its kernel no kernel says (``sig_enforce`` not Y or N)."""


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return None


def signing_built(root: Path) -> bool:
    """Whether the kernel has module signing at all (the ``sig_enforce`` parameter exists)."""
    return _text(root / SIG_ENFORCE) is not None


def sig_enforced(root: Path) -> bool:
    value = _text(root / SIG_ENFORCE)
    if value not in (None, "Y", "N"):
        raise KernelStateError(f"{SIG_ENFORCE} holds {value!r}, not Y or N")
    return value == "Y"


def lockdown(root: Path) -> str:
    """The selected lockdown mode ("none" when securityfs has no lockdown file)."""
    text = _text(root / LOCKDOWN) or ""
    selected = [word[1:-1] for word in text.split() if word.startswith("[")]
    return selected[0] if selected else "none"


def enforces_signatures(root: Path) -> bool:
    """Whether the kernel refuses a module it cannot verify (sig_enforce, or lockdown)."""
    return signing_built(root) and (sig_enforced(root) or lockdown(root) in LOCKED_DOWN)


def mok_keys(root: Path) -> list[TrustedKey]:
    """The Machine Owner Keys shim enrolled (MokListRT); none when the variable is absent or
    does not parse (the kernel skips a list it cannot parse)."""
    path = root / MOK_LIST_RT
    if not path.is_file():
        return []
    try:
        found = x509_certificates(path.read_bytes()[_EFI_ATTRIBUTES:])
        return [TrustedKey(certificate_identity(der), der) for _, der in found]
    except (EfiListError, SignatureFormatError):
        return []


def builtin_keys(root: Path) -> list[TrustedKey]:
    """The keys built into the kernel (BUILTIN_KEYS lines)."""
    keys = []
    for number, line in enumerate((_text(root / BUILTIN_KEYS) or "").splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) not in (2, 3):
            raise KernelStateError(f"{BUILTIN_KEYS} line {number}: {line!r} is not signer, key id")
        der = None
        if len(fields) == 3:
            try:
                der = base64.b64decode(fields[2], validate=True)
            except binascii.Error as error:
                raise KernelStateError(f"{BUILTIN_KEYS} line {number}: {error}") from error
        keys.append(TrustedKey(SignatureFacts(fields[0], fields[1].upper(), ""), der))
    return keys


def trust_builtin_key(root: Path, certificate_der: bytes) -> None:
    """Builds the key of ``certificate_der`` into the node's kernel (a custom kernel's own
    signing key, or a distribution's): modules it signed verify, enrolled or not."""
    identity = certificate_identity(certificate_der)
    path = root / BUILTIN_KEYS
    path.parent.mkdir(parents=True, exist_ok=True)
    line = f"{identity.signer}\t{identity.key_id}\t{base64.b64encode(certificate_der).decode()}"
    with path.open("a") as stream:
        stream.write(line + "\n")


def trusted_keys(root: Path) -> list[TrustedKey]:
    return [*builtin_keys(root), *mok_keys(root)]


def _verify_rsa(image: bytes, facts: SignatureFacts, certificate: bytes) -> int:
    """0 when the signature at the end of ``image`` verifies with ``certificate``'s key, else
    the errno mod_verify_sig returns. The signature value ends the PKCS#7 DER: sign-file's
    single SignerInfo has no unsigned attributes after it."""
    from cryptography import exceptions, x509  # noqa: PLC0415 - only for signed modules
    from cryptography.hazmat.primitives.asymmetric import padding, rsa  # noqa: PLC0415

    from testbed.fakehost.signing import DIGESTS  # noqa: PLC0415

    info_end = len(image) - len(MAGIC)
    info_start = info_end - _SIGNATURE_INFO
    length = int.from_bytes(image[info_end - 4 : info_end], "big")  # sig_len, big-endian
    der, content = image[info_start - length : info_start], image[: info_start - length]
    public_key = x509.load_der_x509_certificate(certificate).public_key()
    digest = DIGESTS.get(facts.hash_algorithm)
    if not isinstance(public_key, rsa.RSAPublicKey) or digest is None:
        return errno.ENOPKG
    value = der[-((public_key.key_size + 7) // 8) :]
    try:
        public_key.verify(value, content, padding.PKCS1v15(), digest())
    except exceptions.InvalidSignature:
        return errno.EKEYREJECTED
    return 0


def _signature_error(root: Path, image: bytes) -> int:
    """mod_verify_sig's answer for a file ending in the magic: 0 or an errno."""
    try:
        facts = read_signature(image)
    except SignatureFormatError:
        return errno.EBADMSG
    if facts is None:
        return errno.ENODATA
    for key in trusted_keys(root):
        if (key.identity.signer, key.identity.key_id.upper()) == (facts.signer, facts.key_id):
            return 0 if key.certificate is None else _verify_rsa(image, facts, key.certificate)
    return errno.ENOKEY


def check(root: Path, image: bytes) -> Verdict:
    """module_sig_check of the module file ``image`` on the node of ``root``."""
    if not signing_built(root):
        return Verdict()  # no CONFIG_MODULE_SIG: nothing checked, nothing tainted
    error = _signature_error(root, image) if image.endswith(MAGIC) else errno.ENODATA
    if error == 0:
        return Verdict()
    if error not in _NOT_FATAL:
        return Verdict(refused=os.strerror(error))
    if sig_enforced(root):
        return Verdict(refused=os.strerror(errno.EKEYREJECTED))
    if lockdown(root) in LOCKED_DOWN:
        return Verdict(refused=os.strerror(errno.EPERM))
    return Verdict(unverified=True)
