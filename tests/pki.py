"""The test API server's throwaway PKI: a CA, a serving certificate, an admin client certificate, a service-account
key pair.

tests/apiserver.py writes it once a folder and reads it back on a restart (a restarted dev cluster keeps its
certificates and tokens valid); bench/dev_cluster.py reads it to talk to a running dev cluster.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path
from typing import Any

ADMIN_USER = "admin"
# key -> file name in the PKI folder: one table for the writer and the reader.
FILES = {"ca_cert": "ca.crt", "ca_key": "ca.key", "serving_cert": "apiserver.crt", "serving_key": "apiserver.key",
         "admin_cert": "admin.crt", "admin_key": "admin.key", "sa_key": "sa.key", "sa_pub": "sa.pub"}
# Where clients reach the API server: 127.0.0.1 from here, and the names a pod would use.
SERVING_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 "kubernetes.default.svc.cluster.local")
SERVING_IPS = ("127.0.0.1", "10.0.0.1")


def read_pki(folder: Path, address: str = "127.0.0.1") -> dict[str, Path] | None:
    """The PKI an earlier start wrote, or None where any file is missing or its serving certificate does not name
    `address` (the API server's, tests.apiserver.ApiServer.address)."""
    paths = {key: folder / name for key, name in FILES.items()}
    if not all(p.is_file() for p in paths.values()):
        return None
    if address not in SERVING_IPS:
        from cryptography import x509

        cert = x509.load_pem_x509_certificate(paths["serving_cert"].read_bytes())
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        if ipaddress.ip_address(address) not in sans.get_values_for_type(x509.IPAddress):
            return None
    return paths


def write_pki(folder: Path, address: str = "127.0.0.1") -> dict[str, Path]:
    """CA, serving cert (127.0.0.1/localhost, `address`, the `kubernetes` Service's names), admin client cert, SA
    key pair: written 0600, their paths returned."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID

    folder.mkdir(parents=True, exist_ok=True)
    ca = _Ca()
    sans = [*(x509.IPAddress(ipaddress.ip_address(ip)) for ip in dict.fromkeys((*SERVING_IPS, address))),
            *(x509.DNSName(n) for n in SERVING_NAMES)]
    serving_key, serving_cert = ca.leaf(_name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, sans)
    admin_key, admin_cert = ca.leaf(_name(ADMIN_USER, "system:masters"), ExtendedKeyUsageOID.CLIENT_AUTH)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = serialization.Encoding.PEM
    data = {
        "ca_cert": ca.cert.public_bytes(pem), "ca_key": _key_pem(ca.key),
        "serving_cert": serving_cert.public_bytes(pem), "serving_key": _key_pem(serving_key),
        "admin_cert": admin_cert.public_bytes(pem), "admin_key": _key_pem(admin_key),
        "sa_key": _key_pem(sa_key),
        "sa_pub": sa_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo),
    }
    paths = {key: folder / name for key, name in FILES.items()}
    for key, path in paths.items():
        path.write_bytes(data[key])
        path.chmod(0o600)
    return paths


def _key_pem(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(cn: str, org: str | None = None) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _key_usage(ca: bool) -> Any:
    """Signing only; a CA also signs certificates and CRLs."""
    from cryptography import x509

    return x509.KeyUsage(digital_signature=True, key_cert_sign=ca, crl_sign=ca, content_commitment=False,
                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                         encipher_only=False, decipher_only=False)


class _Ca:
    """A self-signed EC CA valid for a year (from five minutes ago: clocks differ a little), and what it signs."""

    def __init__(self) -> None:
        from cryptography.hazmat.primitives.asymmetric import ec

        self.not_before = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
        self.not_after = self.not_before + dt.timedelta(days=365)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = _name("gpu-acceptance-envtest-ca")
        from cryptography import x509

        self.cert = self._sign(self._builder(self.name, self.key.public_key(), ca=True).add_extension(
            x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False))

    def _builder(self, subject: Any, public_key: Any, ca: bool) -> Any:
        from cryptography import x509

        return (x509.CertificateBuilder().subject_name(subject).issuer_name(self.name).public_key(public_key)
                .serial_number(x509.random_serial_number())
                .not_valid_before(self.not_before).not_valid_after(self.not_after)
                .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
                .add_extension(_key_usage(ca), critical=True))

    def _sign(self, builder: Any) -> Any:
        from cryptography.hazmat.primitives import hashes

        return builder.sign(self.key, hashes.SHA256())

    def leaf(self, subject: Any, usage: Any, sans: list | None = None) -> tuple[Any, Any]:
        """A new EC key and its certificate for `usage` (server or client auth), signed by this CA."""
        from cryptography import x509
        from cryptography.hazmat.primitives.asymmetric import ec

        key = ec.generate_private_key(ec.SECP256R1())
        builder = (self._builder(subject, key.public_key(), ca=False)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                                  critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return key, self._sign(builder)


# A TLS server's PKI (the real node's registry, tests/registry.py): file names in its folder.
SERVER_FILES = {"ca_cert": "ca.crt", "cert": "tls.crt", "key": "tls.key"}


def write_server_pki(folder: Path, cn: str, ips: tuple[str, ...] = (), names: tuple[str, ...] = ()) -> dict[str, Path]:
    """A CA of its own and a serving certificate for `ips` and `names`, signed by it: written 0600 (the CA
    certificate 0644: clients read it), their paths returned. The CA's key is not kept: nothing else is signed."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID

    folder.mkdir(parents=True, exist_ok=True)
    ca = _Ca()
    sans = [*(x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips), *(x509.DNSName(n) for n in names)]
    key, cert = ca.leaf(_name(cn), ExtendedKeyUsageOID.SERVER_AUTH, sans)
    pem = serialization.Encoding.PEM
    data = {"ca_cert": ca.cert.public_bytes(pem), "cert": cert.public_bytes(pem), "key": _key_pem(key)}
    paths = {k: folder / name for k, name in SERVER_FILES.items()}
    for k, path in paths.items():
        path.write_bytes(data[k])
        path.chmod(0o644 if k == "ca_cert" else 0o600)
    return paths
