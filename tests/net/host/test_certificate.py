import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from core.net.errors import HandshakeError
from core.net.host.certificate import (
    IDENTITY_PROOF_OID,
    _root,
    identity_proof,
    issue_credentials,
    peer_id_from_certificate,
)
from core.trust.identity import Identity


def der(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER)


def test_certificate_proves_its_identity() -> None:
    identity = Identity.generate()
    credentials = issue_credentials(identity)
    assert peer_id_from_certificate(der(credentials.certificate_pem)) == identity.peer_id


def test_each_host_gets_a_fresh_tls_key_but_the_same_root() -> None:
    identity = Identity.generate()
    a, b = issue_credentials(identity), issue_credentials(identity)
    assert a.private_key_pem != b.private_key_pem
    assert a.root_pem == b.root_pem


def test_a_proof_signed_by_another_key_is_refused() -> None:
    claimed, signer = Identity.generate(), Identity.generate()
    forged = identity_proof(signer, b"some other key")
    forged = forged[:5] + claimed.public_key_bytes + forged[5 + 32 :]
    credentials = issue_credentials(signer, proof=forged)
    with pytest.raises(HandshakeError, match="not signed by that key"):
        peer_id_from_certificate(der(credentials.certificate_pem))


def test_a_proof_for_another_tls_key_is_refused() -> None:
    identity = Identity.generate()
    replayed = identity_proof(identity, b"the SPKI of a different certificate")
    credentials = issue_credentials(identity, proof=replayed)
    with pytest.raises(HandshakeError, match="not signed by that key"):
        peer_id_from_certificate(der(credentials.certificate_pem))


def test_malformed_and_missing_proofs() -> None:
    credentials = issue_credentials(Identity.generate(), proof=b"BRID\x01short")
    with pytest.raises(HandshakeError, match="wrong format"):
        peer_id_from_certificate(der(credentials.certificate_pem))
    with pytest.raises(HandshakeError, match="malformed"):
        peer_id_from_certificate(b"not a certificate")
    root_der = _root()[1].public_bytes(Encoding.DER)
    with pytest.raises(HandshakeError, match="no identity proof"):
        peer_id_from_certificate(root_der)
    assert IDENTITY_PROOF_OID.dotted_string.startswith("2.25.")
