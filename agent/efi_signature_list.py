"""Read an EFI signature list (UEFI spec: EFI_SIGNATURE_LIST), as shim's MokListRT holds the
Machine Owner Keys: each X.509 entry's certificate, and its issuer and serial (pure). The
test bed's fake kernel reads the enrolled keys with it too.

Each list: SignatureType (a GUID), SignatureListSize, SignatureHeaderSize and SignatureSize
(little-endian 32-bit), a header, then entries of SignatureSize bytes: the owner's GUID and
the signature data. Only X.509 lists (EFI_CERT_X509_GUID) name keys; hashes (a blocklisted
binary's sha256) are skipped. Anything that does not fit is EfiListError, never a guess.
"""

from __future__ import annotations

import struct
import uuid

from gpuctl.common.module_signature import (
    SignatureFacts,
    SignatureFormatError,
    certificate_identity,
)

EFI_CERT_X509_GUID = uuid.UUID("a5c059a1-94e4-4aa7-87b5-ab155c2bf072")
_HEADER = struct.Struct("<16sIII")
_OWNER_BYTES = 16


class EfiListError(ValueError):
    """The bytes are not EFI signature lists."""


def x509_keys(data: bytes) -> list[SignatureFacts]:
    """The identities of the X.509 certificates in concatenated EFI signature lists."""
    keys = []
    for start, der in x509_certificates(data):
        try:
            keys.append(certificate_identity(der))
        except SignatureFormatError as error:
            raise EfiListError(f"entry at offset {start}: {error}") from error
    return keys


def x509_certificates(data: bytes) -> list[tuple[int, bytes]]:
    """The X.509 certificates (DER) in concatenated EFI signature lists, each with its
    entry's offset."""
    found = []
    pos = 0
    while pos < len(data):
        if pos + _HEADER.size > len(data):
            raise EfiListError(f"{len(data) - pos} bytes left: too short for a list header")
        kind, size, header_size, entry_size = _HEADER.unpack_from(data, pos)
        end = pos + size
        entries = pos + _HEADER.size + header_size
        if size < _HEADER.size or end > len(data) or entries > end:
            raise EfiListError(f"a list of {size} bytes does not fit at offset {pos}")
        if uuid.UUID(bytes_le=kind) == EFI_CERT_X509_GUID:
            if entry_size <= _OWNER_BYTES or (end - entries) % entry_size:
                raise EfiListError(f"X.509 entries of {entry_size} bytes do not fit the list")
            for start in range(entries, end, entry_size):
                found.append((start, data[start + _OWNER_BYTES : start + entry_size]))
        pos = end
    return found
