"""Sign fake kernel-module images the way `scripts/sign-file` does, with a test key pair.

sign-file appends a detached PKCS#7 (CMS) signature in DER - no certificates, no signed
attributes, the signer named by issuer and serial number - then `struct module_signature`
(id_type 2, the DER's length big-endian) and the magic "~Module signature appended~\\n".
`signed` signs with a test key pair (`signing_key`), `sign_file` with any key and certificate
(the sign Pods the test bed's kubelet runs for KMM read them from KMM's Secrets, whose PEM a
`SigningKey` gives). The keys here are made for tests only (testbed; `cryptography` is a
development dependency, never the agent's).
"""

from __future__ import annotations

import datetime
import functools
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import pkcs7
from cryptography.x509.oid import NameOID

from agent.efi_signature_list import EFI_CERT_X509_GUID
from gpuctl.common.module_signature import MAGIC, PKEY_ID_PKCS7

_NOT_BEFORE = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
_TRAILER = struct.Struct(">BBBBB3xI")


@dataclass(frozen=True)
class SigningKey:
    common_name: str
    serial: int
    key: rsa.RSAPrivateKey
    certificate: x509.Certificate

    @property
    def key_id(self) -> str:
        """The serial as modinfo prints a sig_key: colon-separated upper-case hex."""
        raw = self.serial.to_bytes((self.serial.bit_length() + 8) // 8, "big").lstrip(b"\0")
        return ":".join(f"{byte:02X}" for byte in raw)

    @property
    def key_pem(self) -> bytes:
        """The private key as KMM's keySecret holds it (data key `key`): PEM, unencrypted."""
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @property
    def certificate_der(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.DER)

    @property
    def certificate_pem(self) -> bytes:
        """The certificate as KMM's certSecret holds it (data key `cert`): PEM."""
        return self.certificate.public_bytes(serialization.Encoding.PEM)


@functools.cache
def signing_key(
    common_name: str = "gpuctl test signing key", serial: int = 0x5B0A1122
) -> SigningKey:
    """A self-signed RSA-2048 certificate and its key (made once per arguments)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gpuctl tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(_NOT_BEFORE)
        .not_valid_after(_NOT_BEFORE + datetime.timedelta(days=3650))
        .sign(key, hashes.SHA256())
    )
    return SigningKey(common_name, serial, key, certificate)


# sign-file's hash algorithm argument, as OpenSSL names the digests PKCS#7 signs with.
DIGESTS: dict[str, type[pkcs7.PKCS7HashTypes]] = {
    "sha224": hashes.SHA224,
    "sha256": hashes.SHA256,
    "sha384": hashes.SHA384,
    "sha512": hashes.SHA512,
}


def signed(image: bytes, key: SigningKey) -> bytes:
    """`image` with key's sign-file signature appended."""
    return sign_file(image, key.key, key.certificate)


def sign_file(
    image: bytes,
    private_key: pkcs7.PKCS7PrivateKeyTypes,
    certificate: x509.Certificate,
    digest: str = "sha256",
) -> bytes:
    """`image` with a signature appended as `sign-file <digest> <key> <certificate>` appends
    it (`digest`: a name of DIGESTS)."""
    options = [
        pkcs7.PKCS7Options.DetachedSignature,
        pkcs7.PKCS7Options.NoCerts,
        pkcs7.PKCS7Options.NoAttributes,
        pkcs7.PKCS7Options.Binary,
    ]
    signature = (
        pkcs7.PKCS7SignatureBuilder()
        .set_data(image)
        .add_signer(certificate, private_key, DIGESTS[digest]())
        .sign(serialization.Encoding.DER, options)
    )
    return image + signature + _TRAILER.pack(0, 0, PKEY_ID_PKCS7, 0, 0, len(signature)) + MAGIC


_EFI_LIST_HEADER = struct.Struct("<16sIII")
_SHA256_GUID = uuid.UUID("c1c41626-504c-4092-aca9-41f936934328")
OWNER_GUID = uuid.UUID("605dab50-e046-4300-abb6-3dd810dd8b23")  # shim's, as mokutil writes


def efi_signature_lists(keys: Sequence[SigningKey], hashes: Sequence[bytes] = ()) -> bytes:
    """EFI signature lists as MokListRT holds them: one X.509 list per certificate (their
    sizes differ), then one sha256 list of `hashes` (entries that name no key)."""
    lists = b""
    for key in keys:
        der = key.certificate.public_bytes(serialization.Encoding.DER)
        entry = OWNER_GUID.bytes_le + der
        header = _EFI_LIST_HEADER.pack(
            EFI_CERT_X509_GUID.bytes_le, _EFI_LIST_HEADER.size + len(entry), 0, len(entry)
        )
        lists += header + entry
    if hashes:
        entries = b"".join(OWNER_GUID.bytes_le + digest for digest in hashes)
        size = _EFI_LIST_HEADER.size + len(entries)
        lists += _EFI_LIST_HEADER.pack(_SHA256_GUID.bytes_le, size, 0, 16 + 32) + entries
    return lists
