"""Certificates whose issuer Name has an attribute with an empty value, or with none, are read
from an EFI signature list (agent/efi_signature_list.py) without raising: the key is named
as kmod's modinfo would name a module signed with it (gpuctl/common/module_signature.py)."""

from __future__ import annotations

import struct
import uuid

from agent.efi_signature_list import EFI_CERT_X509_GUID, x509_keys

# X.520 attribute types (DER OIDs): commonName 2.5.4.3, organizationName 2.5.4.10.
CN = bytes.fromhex("0603550403")
O_NAME = bytes.fromhex("060355040a")
SHIM_OWNER = uuid.UUID("605dab50-e046-4300-abb6-3dd810dd8b23")  # shim's MOK owner GUID


def tlv(tag: int, body: bytes) -> bytes:
    assert len(body) < 0x80
    return bytes([tag, len(body)]) + body


def certificate(issuer_attributes: list[bytes]) -> bytes:
    """A TBSCertificate carrying version, serial 0x2a, algorithm and issuer (what is read)."""
    name = tlv(0x30, b"".join(tlv(0x31, tlv(0x30, a)) for a in issuer_attributes))
    sha256_rsa = tlv(0x30, bytes.fromhex("06092a864886f70d01010b0500"))
    tbs = tlv(0x30, tlv(0xA0, tlv(0x02, b"\x02")) + tlv(0x02, b"\x2a") + sha256_rsa + name)
    return tlv(0x30, tbs)


def signature_list(der: bytes) -> bytes:
    """One EFI_SIGNATURE_LIST (UEFI spec 32.4.1) holding `der` as shim's MokListRT does."""
    entry = SHIM_OWNER.bytes_le + der
    header = struct.pack("<16sIII", EFI_CERT_X509_GUID.bytes_le, 28 + len(entry), 0, len(entry))
    return header + entry


def test_an_empty_common_name_is_the_signer_s_name_and_raises_nothing() -> None:
    # UTF8String of length 0 (0c 00): DER allows it; modinfo prints the CN's value, empty.
    [key] = x509_keys(
        signature_list(certificate([CN + tlv(0x0C, b""), O_NAME + tlv(0x0C, b"Acme")]))
    )
    assert (key.signer, key.key_id) == ("", "2A")


def test_an_attribute_with_no_value_raises_nothing() -> None:
    [key] = x509_keys(signature_list(certificate([O_NAME, CN + tlv(0x0C, b"Acme module key")])))
    assert (key.signer, key.key_id) == ("Acme module key", "2A")
    [bare] = x509_keys(signature_list(certificate([O_NAME])))
    assert bare.signer == ""
