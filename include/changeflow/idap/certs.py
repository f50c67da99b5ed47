"""Self-signed certificates for HTTPS (tests, demos): a key and a certificate in PEM files.

>>> import tempfile
>>> cert, key = self_signed(tempfile.mkdtemp(), "localhost")
>>> open(cert).read().startswith("-----BEGIN CERTIFICATE-----")
True
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path


def self_signed(directory: str | Path, common_name: str = "localhost", *,
                days: int = 30) -> tuple[str, str]:
    """Write ``<cn>.pem`` and ``<cn>.key`` (valid for localhost and 127.0.0.1); return paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName(common_name), x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = out / f"{common_name}.pem", out / f"{common_name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_file.chmod(0o600)
    return str(cert_file), str(key_file)
