"""The coordinator's public URL: where volunteers reach it, checked before anything is served.

Behind a reverse proxy, or on a name other than the address it listens on, the coordinator cannot
know the URL volunteers use; the organizer says it (``barnraise coordinator --public-url``). It is
the project URL the page shows and the app joins by, so it must be one a client can use as a base:
``http`` or ``https``, a host, no user name or password, nothing after the host but ``/``.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from core.util.errors import ConfigError


def check_public_url(text: str) -> str:
    """``text`` as a base URL (``https://coord.example.org``, lower-case scheme and host, no
    trailing ``/``); ``ConfigError`` naming what is wrong otherwise."""
    example = "e.g. https://coord.example.org"
    try:
        parts = urlsplit(text.strip())
        port = parts.port  # a port that is not a number (or is out of range) raises here
    except ValueError as exc:
        raise ConfigError(f"the public URL {text!r} is not a URL ({exc}); {example}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ConfigError(
            f"the public URL {text!r} must start with https:// (or http://); {example}"
        )
    if not parts.hostname:
        raise ConfigError(f"the public URL {text!r} names no host; {example}")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(f"the public URL {text!r} must not carry a user name or password")
    if (
        parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or text.strip().endswith(("?", "#"))
    ):
        raise ConfigError(
            f"the public URL {text!r} must be the coordinator's root, with no path, query or "
            f"fragment: the coordinator serves at the root of its host ({example}); a proxy "
            "must forward the whole host to it"
        )
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme.lower()}://{host}" + (f":{port}" if port is not None else "")
