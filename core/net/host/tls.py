"""SSL contexts for Barnraise connections: TLS 1.3 only, both sides present certificates.

OpenSSL checks that certificates chain to the public network root (see ``certificate``); who the peer
is comes from ``authenticated_peer``, which checks the identity proof after the handshake.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import ssl
import tempfile
from pathlib import Path

from core.net.errors import HandshakeError
from core.net.host.certificate import TlsCredentials, peer_id_from_certificate
from core.trust.peer_id import PeerID

ALPN_PROTOCOL = "barnraise/1"
# Sent as SNI; hostnames are not checked, identities are.
SERVER_NAME = "barnraise.peer"


def _context(*, server_side: bool, credentials: TlsCredentials) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server_side else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=credentials.root_pem.decode("ascii"))
    ctx.set_alpn_protocols([ALPN_PROTOCOL])
    # load_cert_chain only reads files: write them to a private temporary folder and delete it at once
    folder = tempfile.mkdtemp(prefix="barnraise-tls-")
    try:
        cert_path, key_path = Path(folder, "cert.pem"), Path(folder, "key.pem")
        cert_path.write_bytes(credentials.certificate_pem)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(credentials.private_key_pem)
        ctx.load_cert_chain(cert_path, key_path)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(folder)
    return ctx


def server_context(credentials: TlsCredentials) -> ssl.SSLContext:
    return _context(server_side=True, credentials=credentials)


def client_context(credentials: TlsCredentials) -> ssl.SSLContext:
    return _context(server_side=False, credentials=credentials)


def authenticated_peer(ssl_object: ssl.SSLObject | None) -> PeerID:
    """The PeerID proven by the other side of a completed handshake."""
    if ssl_object is None:
        raise HandshakeError("the connection is not encrypted")
    if ssl_object.version() != "TLSv1.3":
        raise HandshakeError(f"the peer negotiated {ssl_object.version()}, not TLS 1.3")
    if ssl_object.selected_alpn_protocol() != ALPN_PROTOCOL:
        raise HandshakeError(
            f"the peer does not speak {ALPN_PROTOCOL} (offered {ssl_object.selected_alpn_protocol()})"
        )
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        raise HandshakeError("the peer presented no certificate")
    return peer_id_from_certificate(der)
