"""Read the signature appended to a kernel module file: who signed it, with which key and digest.

`scripts/sign-file` appends to the (uncompressed) module: a PKCS#7/CMS SignedData in DER,
then a 12-byte `struct module_signature` (algo, hash, id_type, signer_len, key_id_len, three
pad bytes, the DER's length big-endian), then the magic "~Module signature appended~\\n".
For PKCS#7 (id_type 2) the signer is named inside the DER's SignerInfo: by issuer and serial
number (sign-file's default) or by subject key identifier. This reports what kmod's modinfo
shows for them: `signer` (the issuer's common name, else its last attribute), `sig_key` (the
serial, or the key identifier, as colon-separated hex) and `sig_hashalgo`.

Pure, over bytes, with a small bounded DER reader: the agent's image carries no crypto
library, and it needs none: it reads names, it verifies nothing (the kernel did, and says so
in the module's taint). Anything that does not parse is SignatureFormatError, never a guess.
Shared: the agent names a module's signer and the enrolled keys with it, the rollout's
preflight names the key KMM signs with (`certificate_identity` of the certSecret's PEM).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = b"~Module signature appended~\n"
_INFO = struct.Struct(">BBBBB3xI")  # algo, hash, id_type, signer_len, key_id_len, sig_len
PKEY_ID_PKCS7 = 2

_SEQUENCE, _SET, _INTEGER, _OID, _CONTEXT_0 = 0x30, 0x31, 0x02, 0x06, 0xA0
_SKI = 0x80  # [0] IMPLICIT SubjectKeyIdentifier
_COMMON_NAME = bytes([0x55, 0x04, 0x03])  # 2.5.4.3
_DIGESTS = {
    "1.3.14.3.2.26": "sha1",
    "2.16.840.1.101.3.4.2.1": "sha256",
    "2.16.840.1.101.3.4.2.2": "sha384",
    "2.16.840.1.101.3.4.2.3": "sha512",
    "2.16.840.1.101.3.4.2.4": "sha224",
    "2.16.840.1.101.3.4.2.8": "sha3-256",
    "2.16.840.1.101.3.4.2.9": "sha3-384",
    "2.16.840.1.101.3.4.2.10": "sha3-512",
}


class SignatureFormatError(ValueError):
    """The file ends with the magic, but what comes before it is not a signature we can read."""


@dataclass(frozen=True, slots=True)
class SignatureFacts:
    signer: str
    key_id: str
    hash_algorithm: str


def read_signature(image: bytes) -> SignatureFacts | None:
    """The appended signature of an uncompressed module image; None when it has none."""
    if not image.endswith(MAGIC):
        return None
    end = len(image) - len(MAGIC)
    if end < _INFO.size:
        raise SignatureFormatError("too short for a signature trailer")
    _, _, id_type, _, _, length = _INFO.unpack_from(image, end - _INFO.size)
    start = end - _INFO.size - length
    if start < 0:
        raise SignatureFormatError(f"signature length {length} exceeds the file")
    if id_type != PKEY_ID_PKCS7:
        raise SignatureFormatError(f"signature id type {id_type}, not PKCS#7")
    return _signer_info(image[start : end - _INFO.size])


def _tlv(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """(tag, content start, content end) of the DER element at `pos`, within `end`."""
    if pos + 2 > end:
        raise SignatureFormatError("truncated DER")
    tag, first = data[pos], data[pos + 1]
    pos += 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > 4 or pos + count > end:
            raise SignatureFormatError("bad DER length")
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    if pos + length > end:
        raise SignatureFormatError("DER element runs past its parent")
    return tag, pos, pos + length


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int]]:
    found = []
    while start < end:
        tag, content, stop = _tlv(data, start, end)
        found.append((tag, content, stop))
        start = stop
    return found


def _expect(element: tuple[int, int, int], tag: int, what: str) -> tuple[int, int, int]:
    if element[0] != tag:
        raise SignatureFormatError(f"{what}: tag 0x{element[0]:02x}, expected 0x{tag:02x}")
    return element


def _signer_info(der: bytes) -> SignatureFacts:
    """SignerInfo of ContentInfo{signedData, [0] SignedData{..., signerInfos SET}}."""
    try:
        content_info = _expect(_tlv(der, 0, len(der)), _SEQUENCE, "ContentInfo")
        _, explicit = _children(der, content_info[1], content_info[2])[:2]
        _expect(explicit, _CONTEXT_0, "ContentInfo content")
        signed_data = _expect(_tlv(der, explicit[1], explicit[2]), _SEQUENCE, "SignedData")
        signer_infos = _expect(
            _children(der, signed_data[1], signed_data[2])[-1], _SET, "signerInfos"
        )
        first = _children(der, signer_infos[1], signer_infos[2])[0]
        info = _children(der, *_expect(first, _SEQUENCE, "SignerInfo")[1:])
        sid, digest = info[1], _expect(info[2], _SEQUENCE, "digestAlgorithm")
    except (IndexError, ValueError) as error:
        if isinstance(error, SignatureFormatError):
            raise
        raise SignatureFormatError(f"not a PKCS#7 SignedData: {error}") from error
    oid = _expect(_tlv(der, digest[1], digest[2]), _OID, "digest algorithm")
    algorithm = _oid_text(der[oid[1] : oid[2]])
    if sid[0] == _SKI:
        return SignatureFacts("", _hex(der[sid[1] : sid[2]]), _DIGESTS.get(algorithm, algorithm))
    issuer, serial = _children(der, *_expect(sid, _SEQUENCE, "IssuerAndSerialNumber")[1:])[:2]
    _expect(serial, _INTEGER, "serialNumber")
    return SignatureFacts(
        _issuer_name(der, issuer),
        _hex(der[serial[1] : serial[2]]),
        _DIGESTS.get(algorithm, algorithm),
    )


def _issuer_name(der: bytes, issuer: tuple[int, int, int]) -> str:
    """The issuer's common name, else its last attribute's value."""
    values: list[tuple[bytes, str]] = []
    for rdn in _children(der, *_expect(issuer, _SEQUENCE, "issuer")[1:]):
        for attribute in _children(der, *_expect(rdn, _SET, "RelativeDistinguishedName")[1:]):
            parts = _children(der, *_expect(attribute, _SEQUENCE, "attribute")[1:])
            if not parts:
                continue
            # An empty value (length 0), or none at all, names nothing: "".
            kind, value = parts[0], parts[1] if len(parts) > 1 else None
            text = der[value[1] : value[2]].decode(errors="replace") if value else ""
            values.append((der[kind[1] : kind[2]], text))
    common = [text for kind, text in values if kind == _COMMON_NAME]
    if common:
        return common[-1]
    return values[-1][1] if values else ""


def _oid_text(body: bytes) -> str:
    if not body:
        raise SignatureFormatError("empty OID")
    parts = [body[0] // 40, body[0] % 40]
    value = 0
    for byte in body[1:]:
        value = value << 7 | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(value)
            value = 0
    return ".".join(str(part) for part in parts)


def _hex(body: bytes) -> str:
    """Colon-separated upper-case hex, as modinfo prints a key id ("5B:0A:...")."""
    return ":".join(f"{byte:02X}" for byte in body)


def certificate_identity(der: bytes) -> SignatureFacts:
    """The issuer's name and serial of an X.509 certificate in DER: how modinfo would name a
    module signed with its key (hash_algorithm empty)."""
    try:
        certificate = _expect(_tlv(der, 0, len(der)), _SEQUENCE, "Certificate")
        tbs = _children(der, certificate[1], certificate[2])[0]
        fields = _children(der, *_expect(tbs, _SEQUENCE, "TBSCertificate")[1:])
        if fields and fields[0][0] == _CONTEXT_0:
            fields = fields[1:]  # [0] EXPLICIT version
        serial, _, issuer = fields[:3]
    except (IndexError, ValueError) as error:
        if isinstance(error, SignatureFormatError):
            raise
        raise SignatureFormatError(f"not an X.509 certificate: {error}") from error
    _expect(serial, _INTEGER, "serialNumber")
    return SignatureFacts(_issuer_name(der, issuer), _hex(der[serial[1] : serial[2]]), "")
