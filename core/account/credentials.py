"""CredentialStore: the session and refresh secrets of each coordinator, in the OS keyring.

One keyring entry per coordinator URL (the service name carries it), holding a small JSON object
with the username, the two secrets and the session's expiry. The password is never stored: a
refresh secret can be revoked by the coordinator and rotates on every use; a password cannot.

When no usable keyring exists (a headless Linux box without the Secret Service, say) the store
raises ``KeyringUnavailable`` saying what to install, and that nothing was saved, instead of
writing the secrets somewhere weaker behind the user's back.
"""

from __future__ import annotations

import json
import logging

import keyring
import keyring.backend
import keyring.errors
from keyring.backends import chainer, fail

from core.account.errors import KeyringUnavailable
from core.account.replies import SessionTokens

log = logging.getLogger(__name__)

SERVICE_PREFIX = "barnraise coordinator "
ENTRY = "session"
"""The keyring's "username" slot: one entry per coordinator (its value names the user)."""

SAVE = "your login was not saved (nothing was written)"
LOAD = "no saved login could be read"
DELETE = "no saved login could be removed"
HOW_TO = (
    "On Linux, run a Secret Service provider (GNOME Keyring or KWallet) in your desktop session, "
    "or install 'keyrings.alt' for a file-based keyring (PYTHON_KEYRING_BACKEND picks one)"
)


def service_name(url: str) -> str:
    return SERVICE_PREFIX + url.rstrip("/")


class CredentialStore:
    def __init__(self, backend: keyring.backend.KeyringBackend | None = None) -> None:
        self._backend = backend

    def save(self, url: str, tokens: SessionTokens) -> None:
        value = json.dumps(
            {
                "username": tokens.username,
                "session": tokens.session,
                "refresh": tokens.refresh,
                "session_expires": tokens.session_expires,
                "role": tokens.role,
            }
        )
        backend = self._usable(SAVE)
        try:
            backend.set_password(service_name(url), ENTRY, value)
        except keyring.errors.KeyringError as exc:
            raise _unavailable(exc, SAVE) from None

    def load(self, url: str) -> SessionTokens | None:
        """The saved login for ``url``; None if there is none (or it cannot be read)."""
        backend = self._usable(LOAD)
        try:
            value = backend.get_password(service_name(url), ENTRY)
        except keyring.errors.KeyringError as exc:
            raise _unavailable(exc, LOAD) from None
        if value is None:
            return None
        try:
            data = json.loads(value)
            return SessionTokens(
                username=str(data["username"]),
                session=str(data["session"]),
                refresh=str(data["refresh"]),
                session_expires=float(data["session_expires"]),
                role=str(data.get("role", "volunteer")),
            )
        except (ValueError, KeyError, TypeError):
            log.warning("the saved login for %s is unreadable; ignoring it", url)
            return None

    def delete(self, url: str) -> None:
        backend = self._usable(DELETE)
        try:
            backend.delete_password(service_name(url), ENTRY)
        except keyring.errors.PasswordDeleteError:
            pass  # nothing was saved: nothing to forget
        except keyring.errors.KeyringError as exc:
            raise _unavailable(exc, DELETE) from None

    def _usable(self, consequence: str) -> keyring.backend.KeyringBackend:
        backend = self._backend
        if backend is None:
            try:
                backend = keyring.get_keyring()
            except keyring.errors.KeyringError as exc:
                raise _unavailable(exc, consequence) from None
        if _unusable(backend):
            name = f"{type(backend).__module__}.{type(backend).__name__}"
            raise KeyringUnavailable(
                f"no usable keyring was found (backend {name}), so {consequence}. {HOW_TO}"
            )
        return backend


def _unusable(backend: keyring.backend.KeyringBackend) -> bool:
    if isinstance(backend, fail.Keyring):
        return True
    if isinstance(backend, chainer.ChainerBackend):
        return not backend.backends
    return type(backend).__module__ == "keyring.backends.null"  # accepts and forgets everything


def _unavailable(exc: Exception, consequence: str) -> KeyringUnavailable:
    if isinstance(exc, keyring.errors.KeyringLocked):
        return KeyringUnavailable(f"the keyring is locked, so {consequence}; unlock it and retry")
    return KeyringUnavailable(
        f"the keyring failed ({type(exc).__name__}: {exc}), so {consequence}. {HOW_TO}"
    )
