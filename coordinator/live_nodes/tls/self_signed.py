"""A self-signed CA and the gRPC serving certificate it signs, and when to make new ones.

The coordinator's own TLS when nobody provides a certificate (`--tls-secret`, the chart's
`coordinator.grpc.tls.mode=selfSigned`): coordinator/live_nodes/tls/managed_tls.py stores what this
module makes in a Secret and publishes the CA for the agents. Pure: keys and certificates are
computed here, `now` is a parameter, nothing is read or written.

The CA lives 10 years and is kept across renewals, so agents that trust it keep trusting the
renewed certificate; the serving certificate lives 1 year and is made again 30 days before it
expires, or when the Service's names change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_LIFETIME = timedelta(days=3650)
SERVING_LIFETIME = timedelta(days=365)
RENEW_BEFORE = timedelta(days=30)
# Tolerates clocks of nodes a little behind the coordinator's.
BACKDATE = timedelta(minutes=5)

CERT_KEY, KEY_KEY, CA_KEY, CA_KEY_KEY = "tls.crt", "tls.key", "ca.crt", "ca.key"


@dataclass(frozen=True)
class Pem:
    """A certificate and its private key, PEM."""

    cert: bytes
    key: bytes


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def issue_ca(common_name: str, now: datetime) -> Pem:
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + CA_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
        .sign(key, hashes.SHA256())
    )
    return Pem(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue_serving(ca: Pem, dns_names: Sequence[str], now: datetime) -> Pem:
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an EC key")
    key = _key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + SERVING_LIFETIME, ca_cert.not_valid_after_utc))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return Pem(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def ca_problem(data: Mapping[str, bytes], now: datetime) -> str | None:
    """Why the stored CA cannot sign a new certificate (None: it can)."""
    if not data.get(CA_KEY) or not data.get(CA_KEY_KEY):
        return "no CA in the Secret"
    try:
        cert = x509.load_pem_x509_certificate(data[CA_KEY])
        serialization.load_pem_private_key(data[CA_KEY_KEY], password=None)
    except ValueError as err:
        return f"the CA does not parse: {err}"
    if cert.not_valid_after_utc - now < RENEW_BEFORE + SERVING_LIFETIME:
        return f"the CA expires {cert.not_valid_after_utc:%Y-%m-%d}"
    return None


def serving_problem(
    data: Mapping[str, bytes], dns_names: Sequence[str], now: datetime
) -> str | None:
    """Why the stored serving certificate must be made again (None: it is good)."""
    if not data.get(CERT_KEY) or not data.get(KEY_KEY):
        return "no certificate in the Secret"
    try:
        cert = x509.load_pem_x509_certificate(data[CERT_KEY])
        serialization.load_pem_private_key(data[KEY_KEY], password=None)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        ca = x509.load_pem_x509_certificate(data[CA_KEY])
    except (ValueError, x509.ExtensionNotFound) as err:
        return f"the certificate does not parse: {err}"
    if cert.issuer != ca.subject:
        return "the certificate is not the CA's"
    if sorted(names.value.get_values_for_type(x509.DNSName)) != sorted(dns_names):
        return "the Service's names changed"
    if cert.not_valid_after_utc - now < RENEW_BEFORE:
        return f"the certificate expires {cert.not_valid_after_utc:%Y-%m-%d}"
    return None
