"""Certificates and keys for a throwaway local control plane, made with ``cryptography``.

One CA signs the API server's serving certificate (valid for 127.0.0.1 and localhost) and every
client certificate; the API server maps a client certificate's CN to the user name and its O
entries to groups, so a certificate is how tests become any user (``system:masters`` is admin).
A separate RSA key pair signs service-account tokens.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=7)
CLOCK_SKEW = datetime.timedelta(minutes=5)


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes


def _private_key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def make_ca(now: datetime.datetime, common_name: str = "gpuctl-test-ca") -> KeyPair:
    """A self-signed CA valid from a little before ``now`` for a week."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _private_key_pem(key))


def _issue(
    ca: KeyPair,
    now: datetime.datetime,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName],
) -> KeyPair:
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError("the test CA key is an EC key")
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _private_key_pem(key))


def make_serving_cert(ca: KeyPair, now: datetime.datetime) -> KeyPair:
    """The API server's serving certificate, valid for 127.0.0.1 and localhost only."""
    sans: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.DNSName("localhost"),
    ]
    return _issue(ca, now, _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, sans)


def make_client_cert(
    ca: KeyPair, now: datetime.datetime, user: str, groups: tuple[str, ...] = ()
) -> KeyPair:
    """A client certificate the API server reads as ``user`` in ``groups``."""
    return _issue(ca, now, _name(user, groups), ExtendedKeyUsageOID.CLIENT_AUTH, [])


def make_service_account_signing_key() -> bytes:
    """The PEM RSA private key that signs (and whose public half verifies) SA tokens."""
    return _private_key_pem(rsa.generate_private_key(public_exponent=65537, key_size=2048))


def public_key_pem(private_key_pem: bytes) -> bytes:
    """The PEM public key of a PEM private key."""
    key = serialization.load_pem_private_key(private_key_pem, password=None)
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
