"""The coordinator over HTTPS: its own certificate, the checks on the files, the public URL, and a
client that trusts the system's store (``SSL_CERT_FILE`` on Linux) and nothing else."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.account import CoordinatorClient
from core.account.errors import CoordinatorUnavailable
from core.coordinator import CoordinatorService
from core.coordinator.public_url import check_public_url
from core.coordinator.tls import server_tls_context
from core.net import Identity
from core.util.errors import ConfigError
from tests.coordinator.conftest import FAST_SCRYPT, PASSWORD, make_manifest
from tests.support.certificates import Pki, make_pki
from tests.support.leaks import assert_no_leaks, open_fd_count


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


@pytest.fixture
async def https_coordinator(tmp_path: Path, pki: Pki) -> AsyncIterator[CoordinatorService]:
    baseline = open_fd_count()
    key = Identity.generate()
    service = CoordinatorService(
        make_manifest(key), tmp_path / "coordinator.db", key, scrypt_n=FAST_SCRYPT.n
    )
    await service.start("127.0.0.1", 0, ssl_context=server_tls_context(pki.cert, pki.key).context)
    service.store.add_user("grace", PASSWORD, params=FAST_SCRYPT)
    try:
        yield service
    finally:
        await service.close()
    await assert_no_leaks(baseline)


async def test_a_client_that_trusts_the_authority_logs_in_over_https(
    https_coordinator: CoordinatorService, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert https_coordinator.url == f"https://127.0.0.1:{https_coordinator.port}"
    assert https_coordinator.public_url == https_coordinator.url
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))  # the organizer's authority, system-wide
    async with CoordinatorClient(https_coordinator.url) as client:
        info = await client.info()
        assert info.project == https_coordinator.project
        tokens = await client.login("grace", PASSWORD)
        assert tokens.username == "grace"
        await client.logout(tokens)


async def test_a_client_without_the_authority_is_refused_in_plain_words(
    https_coordinator: CoordinatorService,
) -> None:
    async with CoordinatorClient(https_coordinator.url) as client:
        with pytest.raises(CoordinatorUnavailable) as refused:
            await client.login("grace", PASSWORD)
    message = str(refused.value)
    assert message.startswith(
        f"cannot connect securely to the coordinator at {https_coordinator.url}"
    )
    assert "certificate is not trusted" in message
    assert "unable to get local issuer certificate" in message
    assert "certificate authority" in message
    assert PASSWORD not in message


async def test_an_https_address_for_a_plain_coordinator_says_what_to_check(
    tmp_path: Path,
) -> None:
    key = Identity.generate()
    service = CoordinatorService(make_manifest(key), tmp_path / "c.db", key)
    await service.start("127.0.0.1", 0)
    try:
        assert service.url.startswith("http://")
        async with CoordinatorClient(service.url.replace("http://", "https://")) as client:
            with pytest.raises(CoordinatorUnavailable, match="speaks HTTPS on that port"):
                await client.info()
    finally:
        await service.close()


def test_the_certificate_files_are_checked_before_listening(tmp_path: Path, pki: Pki) -> None:
    served = server_tls_context(pki.cert, pki.key)
    assert served.names == ("localhost", "127.0.0.1")

    def refused(cert: Path, key: Path) -> str:
        with pytest.raises(ConfigError) as error:
            server_tls_context(cert, key)
        return str(error.value)

    assert "does not belong to the certificate" in refused(pki.cert, pki.other_key)
    missing = tmp_path / "nothing.pem"
    assert f"cannot read the TLS certificate file {missing}" in refused(missing, pki.key)
    assert f"cannot read the TLS key file {missing}" in refused(pki.cert, missing)
    assert "is a folder" in refused(tmp_path, pki.key)
    assert "holds no PEM certificate" in refused(pki.key, pki.key)  # the files swapped
    assert "holds no PEM private key" in refused(pki.cert, pki.cert)
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"\x00" * 100)
    assert "holds no PEM certificate" in refused(garbage, pki.key)

    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pki.key.read_bytes(), password=None)
    locked = tmp_path / "locked.pem"
    locked.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    assert "protected by a passphrase" in refused(pki.cert, locked)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_key_says_whose_it_must_be(pki: Pki) -> None:
    pki.key.chmod(0o000)
    with pytest.raises(ConfigError, match="permission denied; the coordinator's user"):
        server_tls_context(pki.cert, pki.key)


def test_an_expired_certificate_is_served_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    expired = make_pki(tmp_path / "old", expired=True)
    with caplog.at_level(logging.WARNING, "core.coordinator.tls"):
        server_tls_context(expired.cert, expired.key)
    assert "expired on" in caplog.text
    assert "clients refuse it until it is renewed" in caplog.text


def test_public_urls_are_bare_http_or_https_bases() -> None:
    assert check_public_url("https://Coord.Example.org/") == "https://coord.example.org"
    assert check_public_url(" HTTPS://coord.example.org:8443") == "https://coord.example.org:8443"
    assert check_public_url("http://[2001:db8::1]:8470") == "http://[2001:db8::1]:8470"
    for bad, words in [
        ("coord.example.org", "must start with https://"),
        ("ftp://coord.example.org", "must start with https://"),
        ("https://", "names no host"),
        ("https://coord.example.org/barnraise", "no path, query or fragment"),
        ("https://coord.example.org/?x=1", "no path, query or fragment"),
        ("https://coord.example.org/#key=abc", "no path, query or fragment"),
        ("https://coord.example.org?", "no path, query or fragment"),
        ("https://user:pw@coord.example.org", "user name or password"),
        ("https://coord.example.org:99999", "is not a URL"),
        ("https://coord.example.org:http", "is not a URL"),
    ]:
        with pytest.raises(ConfigError, match=words):
            check_public_url(bad)


def test_the_service_checks_its_public_url(tmp_path: Path) -> None:
    key = Identity.generate()
    with pytest.raises(ConfigError, match="no path, query or fragment"):
        CoordinatorService(
            make_manifest(key), tmp_path / "c.db", key, public_url="https://x.org/join"
        )
    service = CoordinatorService(
        make_manifest(key), tmp_path / "c.db", key, public_url="https://X.org/"
    )
    assert service.public_url == "https://x.org"
