"""TLS certificates that carry a proof of the peer's identity key.

Each Host makes a fresh TLS key and a certificate holding an extension with the Ed25519 identity public
key and the identity key's signature over the certificate's SubjectPublicKeyInfo (the idea of libp2p's
TLS handshake). Completing the TLS handshake proves possession of the TLS key; the extension binds that
key to the identity, so the peer on the other end is exactly the PeerID the extension names.

Why a "network root": Python's ``ssl`` module has no certificate-verification callback, and OpenSSL will
only ask for and accept a client certificate that chains to a trusted root. So every Barnraise leaf is
signed by one fixed root whose private key is derived from a public constant. The root therefore vouches
for nothing; all authentication comes from the identity proof, checked on both ends after the handshake.
"""

from __future__ import annotations

import datetime
import hashlib
import secrets
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from core.net.errors import HandshakeError
from core.trust.identity import Identity
from core.trust.peer_id import PeerID

# An OID under 2.25 (derived from a UUID, so it needs no registration); .1 is the identity proof.
IDENTITY_PROOF_OID = x509.ObjectIdentifier("2.25.50063715888514600267049181859924056317.1")
SIGNATURE_PREFIX = b"barnraise-tls-handshake:"
_PROOF_MAGIC = b"BRID\x01"
_PUBLIC_ROOT_SEED = hashlib.sha256(b"barnraise public network root, version 1").digest()
_NOT_BEFORE = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
_NOT_AFTER = datetime.datetime(9999, 12, 31, tzinfo=datetime.UTC)


@dataclass(frozen=True)
class TlsCredentials:
    """PEM blobs for one Host: its leaf certificate and TLS key, and the root to trust."""

    certificate_pem: bytes
    private_key_pem: bytes
    root_pem: bytes


def _root() -> tuple[Ed25519PrivateKey, x509.Certificate]:
    key = Ed25519PrivateKey.from_private_bytes(_PUBLIC_ROOT_SEED)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Barnraise public network root")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(_NOT_BEFORE)
        .not_valid_after(_NOT_AFTER)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, None)
    )
    return key, cert


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _spki(cert_or_key_public: x509.Certificate) -> bytes:
    return cert_or_key_public.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def identity_proof(identity: Identity, spki_der: bytes) -> bytes:
    """The extension value binding a TLS key (its SPKI) to ``identity``."""
    return _PROOF_MAGIC + identity.public_key_bytes + identity.sign(SIGNATURE_PREFIX + spki_der)


def issue_credentials(identity: Identity, *, proof: bytes | None = None) -> TlsCredentials:
    """A fresh TLS key and a certificate proving it belongs to ``identity``.

    ``proof`` replaces the identity proof; only tests use it, to forge bad certificates.
    """
    root_key, root_cert = _root()
    tls_key = Ed25519PrivateKey.generate()
    spki = tls_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, str(identity.peer_id))])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(root_cert.subject)
        .public_key(tls_key.public_key())
        .serial_number(int.from_bytes(secrets.token_bytes(16), "big") >> 1)
        .not_valid_before(_NOT_BEFORE)
        .not_valid_after(_NOT_AFTER)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(root_key.public_key()),
            critical=False,
        )
        .add_extension(
            x509.UnrecognizedExtension(IDENTITY_PROOF_OID, proof or identity_proof(identity, spki)),
            critical=False,
        )
        .sign(root_key, None)
    )
    pem = serialization.Encoding.PEM
    return TlsCredentials(
        certificate_pem=cert.public_bytes(pem),
        private_key_pem=tls_key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        root_pem=root_cert.public_bytes(pem),
    )


def peer_id_from_certificate(der: bytes) -> PeerID:
    """Check the identity proof in a peer's certificate and return the PeerID it proves."""
    try:
        cert = x509.load_der_x509_certificate(der)
        extension = cert.extensions.get_extension_for_oid(IDENTITY_PROOF_OID)
    except x509.ExtensionNotFound:
        raise HandshakeError("the peer's certificate carries no identity proof") from None
    except ValueError as exc:
        raise HandshakeError(f"the peer's certificate is malformed: {exc}") from None
    value = extension.value
    proof = value.value if isinstance(value, x509.UnrecognizedExtension) else b""
    if len(proof) != len(_PROOF_MAGIC) + 32 + 64 or not proof.startswith(_PROOF_MAGIC):
        raise HandshakeError("the peer's identity proof has the wrong format")
    public_key = proof[len(_PROOF_MAGIC) : len(_PROOF_MAGIC) + 32]
    signature = proof[len(_PROOF_MAGIC) + 32 :]
    peer = PeerID.from_public_bytes(public_key)
    if not peer.verify(signature, SIGNATURE_PREFIX + _spki(cert)):
        raise HandshakeError(f"the identity proof of {peer} is not signed by that key")
    return peer
