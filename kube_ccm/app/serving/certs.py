"""Self-signed serving certificates, as upstream generates when none are given.

``localhost`` and ``127.0.0.1`` (plus any extra hosts) in the subject alternative
names; an EC P-256 key; valid for a year. Written to ``cert_dir`` when given
(reused if present, as upstream's ``--cert-dir``), else to a private temporary
directory for this process.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def self_signed(common_name: str, hosts: Sequence[str] = ()) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) for ``localhost``, ``127.0.0.1`` and ``hosts``."""
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in ("localhost", "127.0.0.1", *hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def serving_context(
    *,
    cert_file: str = "",
    key_file: str = "",
    cert_dir: str = "",
    pair_name: str = "cloud-controller-manager",
) -> tuple[ssl.SSLContext, Path]:
    """A server TLS context and the certificate file it serves (for a caBundle)."""
    if bool(cert_file) != bool(key_file):
        raise ValueError("give both a TLS certificate file and its private key file, or neither")
    if cert_file:
        cert_path, key_path = Path(cert_file), Path(key_file)
    else:
        directory = Path(cert_dir) if cert_dir else Path(tempfile.mkdtemp(prefix="kube-ccm-tls-"))
        directory.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = directory / f"{pair_name}.crt", directory / f"{pair_name}.key"
        if not (cert_path.is_file() and key_path.is_file()):
            cert_pem, key_pem = self_signed(pair_name)
            key_path.touch(mode=0o600)
            key_path.write_bytes(key_pem)
            cert_path.write_bytes(cert_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)
    return context, cert_path
