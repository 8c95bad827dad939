"""A private CA and a certificate it signs, for `bluedove up --tls self-signed` and the tests
(cryptography, the `tls` extra): the certificate names 127.0.0.1 and localhost, and serves as
both ends of a connection (docs/security.md, "TLS")."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path
from typing import cast

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes, PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from bluedove.runtime.settings import TlsSettings

VALID_DAYS = 365


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key: PrivateKeyTypes, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def make_ca(folder: Path, cn: str = "bluedove local CA") -> tuple[Path, Path]:
    """A self-signed CA in `folder`: (ca.pem, ca.key)."""
    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(key, hashes.SHA256()))
    ca_pem, ca_key = folder / "ca.pem", folder / "ca.key"
    ca_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, ca_key)
    ca_key.chmod(0o600)
    return ca_pem, ca_key


def issue(folder: Path, ca: tuple[Path, Path], name: str = "node", dns: tuple[str, ...] = ("localhost",),
          ips: tuple[str, ...] = ("127.0.0.1",)) -> TlsSettings:
    """A certificate for both ends of a connection (server and client auth) with the given
    names, signed by `ca`: folder/NAME.pem and folder/NAME.key."""
    ca_cert = x509.load_pem_x509_certificate(ca[0].read_bytes())
    # A CA's key is one that signs (make_ca's is an EC key); any other fails in sign() as before.
    ca_key = cast(CertificateIssuerPrivateKeyTypes,
                  serialization.load_pem_private_key(ca[1].read_bytes(), password=None))
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    sans = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem, key_path = folder / f"{name}.pem", folder / f"{name}.key"
    pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, key_path)
    key_path.chmod(0o600)
    return TlsSettings(str(pem), str(key_path), str(ca[0]))


def ensure(folder: Path) -> tuple[TlsSettings, bool]:
    """FOLDER/ca.pem and FOLDER/node.pem (+ keys): the ones there, else new. (settings, made)"""
    files = TlsSettings(str(folder / "node.pem"), str(folder / "node.key"), str(folder / "ca.pem"))
    if all(Path(f).is_file() for f in (files.tls_cert, files.tls_key, files.tls_ca)):
        return files, False
    return issue(folder, make_ca(folder)), True
