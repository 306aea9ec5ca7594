"""CredentialStore with an in-memory keyring, and without any usable keyring."""

from __future__ import annotations

import json

import pytest
from keyring.backends import chainer, fail
from keyring.errors import KeyringLocked, NoKeyringError

from core.account import CredentialStore, KeyringUnavailable, SessionTokens
from core.account.credentials import service_name
from tests.account.memory_keyring import MemoryKeyring

URL = "https://coordinator.example:8470"
TOKENS = SessionTokens("alice", "session-secret", "refresh-secret", 1_800_000_000.0, "volunteer")


def test_logins_are_kept_per_coordinator_and_forgotten() -> None:
    backend = MemoryKeyring()
    store = CredentialStore(backend)
    assert store.load(URL) is None
    store.save(URL + "/", TOKENS)  # a trailing slash names the same coordinator
    assert store.load(URL) == TOKENS
    ((service, _),) = backend.entries
    assert service == service_name(URL)
    assert URL in service
    stored = json.loads(next(iter(backend.entries.values())))
    assert set(stored) == {"username", "session", "refresh", "session_expires", "role"}

    other = "http://127.0.0.1:9999"
    store.save(other, SessionTokens("bob", "s2", "r2", 1.0))
    assert store.load(URL) == TOKENS
    assert store.load(other) is not None
    store.delete(URL)
    store.delete(URL)  # forgetting twice is fine
    assert store.load(URL) is None
    assert store.load(other) is not None


def test_an_unreadable_entry_is_ignored() -> None:
    backend = MemoryKeyring()
    backend.set_password(service_name(URL), "session", "{not json")
    assert CredentialStore(backend).load(URL) is None


@pytest.mark.parametrize(
    "backend", [fail.Keyring(), chainer.ChainerBackend()], ids=["fail", "empty-chainer"]
)
def test_no_usable_keyring_is_a_clear_error(backend: object) -> None:
    store = CredentialStore(backend)  # type: ignore[arg-type]
    with pytest.raises(KeyringUnavailable) as refused:
        store.save(URL, TOKENS)
    message = str(refused.value)
    for words in ("no usable keyring", "not saved", "Secret Service", "keyrings.alt"):
        assert words in message
    assert "refresh-secret" not in message
    with pytest.raises(KeyringUnavailable, match="no saved login could be read"):
        store.load(URL)


class _Broken(MemoryKeyring):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def set_password(self, service: str, username: str, password: str) -> None:
        raise self.error


def test_a_keyring_failing_on_use_is_a_clear_error() -> None:
    with pytest.raises(KeyringUnavailable, match=r"NoKeyringError.*not saved.*keyrings\.alt"):
        CredentialStore(_Broken(NoKeyringError("no backend"))).save(URL, TOKENS)
    with pytest.raises(KeyringUnavailable, match="locked"):
        CredentialStore(_Broken(KeyringLocked("locked"))).save(URL, TOKENS)
