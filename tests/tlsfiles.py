"""Certificates made at test time with ``cryptography``: a CA, the broker's certificate and
key in one PEM file (Kafka's PEM keystore layout), client certificates."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Pki:
    ca: Path  # the CA certificate (truststore for both sides)
    broker: Path  # the broker's certificate chain and key (ssl.keystore.location)
    client_cert: Path
    client_key: Path
    client_subject: str  # RFC 2253
    password: str | None


def _name(cn: str, org: str = "Headrace Tests") -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "NL"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
        ]
    )


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key(key, password: str | None) -> bytes:
    encryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


def make_pki(directory: Path, password: str | None = None, ca_name: str = "test ca") -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    valid = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_subject = _name(ca_name)
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_subject)
        .issuer_name(ca_subject)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, server: bool):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn))
            .issuer_name(ca_subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid[0])
            .not_valid_after(valid[1])
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        return builder.sign(ca_key, hashes.SHA256()), key

    broker_cert, broker_key = leaf("localhost", True)
    client, client_key = leaf("alice", False)
    (directory / "ca.pem").write_bytes(_pem(ca))
    # Kafka's PEM keystore file: the certificate chain, then the private key
    (directory / "broker.pem").write_bytes(
        _pem(broker_cert) + _pem(ca) + _key(broker_key, password)
    )
    (directory / "client.pem").write_bytes(_pem(client))
    (directory / "client.key").write_bytes(_key(client_key, None))
    return Pki(
        directory / "ca.pem",
        directory / "broker.pem",
        directory / "client.pem",
        directory / "client.key",
        "CN=alice,O=Headrace Tests,C=NL",
        password,
    )
