"""ProjectUrl: a project URL as volunteers paste it, checked and normalised.

A project URL is its coordinator's public base URL (``https://coord.example.org``, a path allowed
for a coordinator behind a proxy under one), optionally carrying the project key to pin as a
fragment: ``https://coord.example.org/#key=<PeerID>``. The fragment never leaves this computer
(browsers and HTTP clients do not send it), so it is a way for an organizer to hand out the key
with the URL, on a web page, a poster or a chat message.

Normalised: scheme and host in lower case, the scheme's default port dropped, no trailing ``/``,
no fragment; the same project is one URL however it was typed. The engine and the fake engine
both read URLs through this, and the engine remembers a project's URL in this form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from core.api.errors import BadRequest

MAX_URL_CHARS = 4096
"""A project URL is short; a longer one is refused before anything fetches it."""
PEER_ID_TEXT = re.compile(r"[1-9A-HJ-NP-Za-km-z]{20,128}")
"""A PeerID as text (base58btc) at a glance; the engine checks that it names an Ed25519 key."""
MANIFEST_PATH = "/manifest"
"""Where a coordinator serves its signed manifest, under the project URL."""
_DEFAULT_PORTS = {"http": 80, "https": 443}


def is_project_url(text: str) -> bool:
    """Whether ``text`` is meant as a project URL (http:// or https://) rather than a path."""
    return text.strip().lower().startswith(("http://", "https://"))


@dataclass(frozen=True)
class ProjectUrl:
    url: str
    """Normalised, without the fragment."""
    key: str | None = None
    """The PeerID the fragment's ``key=`` names, or None."""

    @property
    def manifest_url(self) -> str:
        """Where the coordinator serves the project's signed manifest."""
        return self.url + MANIFEST_PATH

    @classmethod
    def parse(cls, text: str) -> ProjectUrl:
        """The URL in ``text``; ``BadRequest`` saying what is wrong with it otherwise."""
        text = text.strip()
        shown = text[:200]
        if not text:
            raise BadRequest("the project URL is empty")
        if len(text) > MAX_URL_CHARS:
            raise BadRequest(f"the project URL is longer than {MAX_URL_CHARS} characters")
        if not is_project_url(text):
            raise BadRequest(
                f"{shown!r} is not a project URL: one starts with https:// (or http://)"
            )
        if not text.isascii() or any(c.isspace() or not c.isprintable() for c in text):
            raise BadRequest(
                f"{shown!r} is not a project URL: it has spaces or characters a URL cannot have"
            )
        try:
            parts = urlsplit(text)
            port = parts.port
        except ValueError as exc:
            raise BadRequest(f"{shown!r} is not a project URL: {exc}") from None
        host = (parts.hostname or "").lower()
        if not host:
            raise BadRequest(f"{shown!r} names no host (https://coord.example.org)")
        if parts.username is not None or parts.password is not None:
            raise BadRequest(f"{shown!r}: a project URL carries no user name or password")
        if parts.query:
            raise BadRequest(f"{shown!r}: a project URL has no query ('?...')")
        scheme = parts.scheme.lower()
        netloc = f"[{host}]" if ":" in host else host
        if port is not None and port != _DEFAULT_PORTS[scheme]:
            netloc += f":{port}"
        path = parts.path.rstrip("/")
        url = urlunsplit((scheme, netloc, path, "", ""))
        return cls(url, _fragment_key(parts.fragment, shown))

    def __str__(self) -> str:
        return self.url if self.key is None else f"{self.url}/#key={self.key}"


def _fragment_key(fragment: str, shown: str) -> str | None:
    """The ``key=`` of a fragment such as ``key=12D3KooW...`` (other parts are ignored)."""
    for part in fragment.split("&"):
        name, sep, value = part.partition("=")
        if sep and name == "key":
            if not PEER_ID_TEXT.fullmatch(value):
                raise BadRequest(f"{shown!r}: the key in the URL ({value[:80]!r}) is not a PeerID")
            return value
    return None
