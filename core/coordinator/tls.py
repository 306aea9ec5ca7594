"""The coordinator's own HTTPS: a server TLS context from certificate and key files, checked first.

``server_tls_context(cert, key)`` reads both PEM files (what certbot and most authorities hand out:
``fullchain.pem`` and ``privkey.pem``), and refuses in plain words, before anything listens, a file
it cannot read, one that holds no certificate or no key, a key protected by a passphrase (the
service starts unattended: nobody could type it), and a key that does not belong to the first
certificate of the file. A certificate outside its validity dates is served, with a warning:
clients will refuse it until it is renewed, and the organizer should see why.
"""

from __future__ import annotations

import datetime
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificatePublicKeyTypes,
    PrivateKeyTypes,
    PublicKeyTypes,
)

from core.util.errors import ConfigError
from core.util.files.regular_file import FileRefused, read_regular_file

log = logging.getLogger(__name__)

MAX_PEM_BYTES = 1 << 20
"""A certificate chain or key is a few kilobytes; anything past this is not one."""


@dataclass(frozen=True)
class ServerTls:
    context: ssl.SSLContext
    names: tuple[str, ...]
    """The host names and addresses the certificate is for (its subject alternative names)."""
    expires: datetime.datetime


def server_tls_context(cert: Path, key: Path) -> ServerTls:
    """A TLS server context serving ``cert`` (the server's certificate, then its chain) with
    ``key``; ``ConfigError`` saying what is wrong with either file and what to do."""
    chain = _certificates(cert, _read(cert, "certificate"))
    private = _private_key(key, _read(key, "key"))
    if _public(chain[0].public_key()) != _public(private.public_key()):
        raise ConfigError(
            f"the TLS key in {key} does not belong to the certificate in {cert}: pass the key "
            "that was made with that certificate (the certificate file must start with the "
            "server's own certificate, its chain after it)"
        )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key, password=_no_passphrase)
    except (ssl.SSLError, OSError) as exc:  # checked above; a file changed since, or OpenSSL's own
        raise ConfigError(f"cannot use the TLS certificate {cert} with key {key}: {exc}") from None
    served = ServerTls(context, _names(chain[0]), chain[0].not_valid_after_utc)
    _warn_if_outside_dates(chain[0], cert)
    return served


def _read(path: Path, what: str) -> bytes:
    try:
        return read_regular_file(path, limit=MAX_PEM_BYTES)
    except FileRefused as exc:
        raise ConfigError(f"the TLS {what} file {exc}") from None
    except PermissionError:
        raise ConfigError(
            f"cannot read the TLS {what} file {path}: permission denied; the coordinator's user "
            "must be able to read it (certbot's are root's: copy them in a deploy hook)"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"cannot read the TLS {what} file {path}: {exc.strerror or exc}"
        ) from None


def _certificates(path: Path, data: bytes) -> list[x509.Certificate]:
    try:
        chain = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise ConfigError(
            f"{path} holds no PEM certificate (a block starting '-----BEGIN CERTIFICATE-----'); "
            "pass the certificate file to --tls-cert and its key to --tls-key"
        ) from None
    return chain


def _private_key(path: Path, data: bytes) -> PrivateKeyTypes:
    try:
        return serialization.load_pem_private_key(data, password=None)
    except TypeError:  # cryptography's word for "encrypted, and no password given"
        raise ConfigError(
            f"the TLS key in {path} is protected by a passphrase, which nobody is there to type "
            "when the coordinator starts; write it out without one, readable only by the "
            f"coordinator's user (openssl pkey -in {path} -out KEY.pem), and pass that"
        ) from None
    except UnsupportedAlgorithm as exc:
        raise ConfigError(f"the TLS key in {path} is of a kind not supported here: {exc}") from None
    except ValueError:
        raise ConfigError(
            f"{path} holds no PEM private key (a block starting '-----BEGIN PRIVATE KEY-----' or "
            "'-----BEGIN RSA/EC PRIVATE KEY-----'); pass the key to --tls-key"
        ) from None


def _no_passphrase() -> bytes:
    raise ConfigError("the TLS key is protected by a passphrase")


def _public(key: PublicKeyTypes | CertificatePublicKeyTypes) -> bytes:
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _names(certificate: x509.Certificate) -> tuple[str, ...]:
    try:
        extension = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return ()
    names = extension.value
    return tuple(names.get_values_for_type(x509.DNSName)) + tuple(
        str(ip) for ip in names.get_values_for_type(x509.IPAddress)
    )


def _warn_if_outside_dates(certificate: x509.Certificate, path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    if now > certificate.not_valid_after_utc:
        log.warning(
            "the TLS certificate in %s expired on %s: clients refuse it until it is renewed",
            path,
            certificate.not_valid_after_utc.strftime("%Y-%m-%d %H:%M UTC"),
        )
    elif now < certificate.not_valid_before_utc:
        log.warning(
            "the TLS certificate in %s is valid only from %s (is this computer's clock right?)",
            path,
            certificate.not_valid_before_utc.strftime("%Y-%m-%d %H:%M UTC"),
        )
