"""HTTP clients that may reach the internet: the operating system's certificates and proxy settings.

Every aiohttp session in core/ that may talk to a host beyond this computer (a project's coordinator,
a published checkpoint, a data shard) comes from ``client_session``; blocking readers (urllib) use
``open_url``. Both trust what the operating system trusts, through the ``truststore`` package: the
Windows certificate store, the macOS keychain, and on Linux OpenSSL's default paths (the
distribution's bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set). So a certificate authority
an organization installed system-wide works here as it does in the browser, and Python's own bundle
(or certifi's) is never what decides. Both also take the system's proxy settings: ``HTTP_PROXY``,
``HTTPS_PROXY`` and ``NO_PROXY`` from the environment, and where none is set, Windows' Internet
Options and macOS's network settings (``urllib.request.getproxies``, which aiohttp's ``trust_env``
and urllib's openers both consult).

A session made for a loopback address (``url=``), and ``open_url`` of one, never use a proxy: a proxy
elsewhere cannot reach this computer's loopback, and ``NO_PROXY`` rarely lists it (urllib and aiohttp
bypass loopback only where the settings say so, as Windows' ``<local>`` does).

Not for the local control API (``core.api.client``) nor the router on the LAN (``core.net.reach.portmap``):
those stay on plain aiohttp sessions that never consult a proxy.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import ssl
import urllib.request
from http.client import HTTPResponse
from typing import Any
from urllib.parse import urlsplit

import aiohttp

log = logging.getLogger(__name__)


def client_ssl_context() -> ssl.SSLContext:
    """A TLS client context that verifies servers against the operating system's trust store
    (``truststore``); Python's default context only if ``truststore`` is missing (logged once).

    On Linux truststore loads OpenSSL's default paths (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` as
    they are then) for each new connection, which blocks for some tens of milliseconds with a
    distribution's bundle; sessions keep their connections alive, so that is rare."""
    truststore = _truststore()
    if truststore is None:
        return ssl.create_default_context()
    context: ssl.SSLContext = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    return context


def client_session(
    timeout: aiohttp.ClientTimeout, *, url: str | None = None, **kwargs: Any
) -> aiohttp.ClientSession:
    """An aiohttp session that verifies servers with ``client_ssl_context`` and takes the system's
    proxy settings (``trust_env=True``: aiohttp asks ``urllib.request.getproxies`` and
    ``proxy_bypass`` for each request's host, so the environment's ``HTTP(S)_PROXY`` / ``NO_PROXY``
    and, on Windows and macOS, the system proxy settings apply; HTTPS goes through the proxy in a
    CONNECT tunnel, verified end to end; an ``https://`` proxy address is one aiohttp ignores, with
    a warning; with ``trust_env`` aiohttp also reads credentials for a host from ``~/.netrc``, as
    curl does).

    ``url``: the address the session will talk to, when it is one; a loopback one (``localhost``,
    127.0.0.0/8, ``::1``) goes direct, never through a proxy. Other keyword arguments go to
    ``aiohttp.ClientSession`` (``trust_env=False`` turns proxies off); its connector is this
    module's, so ``connector`` is refused. Call it on the event loop that will use the session."""
    if "connector" in kwargs:
        raise TypeError("client_session makes its own connector (the system's trust store)")
    options: dict[str, Any] = {"trust_env": url is None or not is_loopback_url(url)}
    options.update(kwargs)
    connector = aiohttp.TCPConnector(ssl=client_ssl_context())
    return aiohttp.ClientSession(timeout=timeout, connector=connector, **options)


def open_url(url: str, *, timeout: float) -> HTTPResponse:
    """``urllib.request.urlopen`` with ``client_ssl_context``: the blocking readers' way to the
    same trust store. urllib's default opener already takes the system's proxy settings
    (``getproxies``); a loopback URL goes direct here too."""
    context = client_ssl_context()
    if is_loopback_url(url):
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )
        response: HTTPResponse = opener.open(url, timeout=timeout)
        return response
    opened: HTTPResponse = urllib.request.urlopen(url, timeout=timeout, context=context)
    return opened


def is_loopback_url(url: str) -> bool:
    """Whether ``url``'s host is this computer's loopback: ``localhost`` (and ``*.localhost``,
    which RFC 6761 reserves for it), 127.0.0.0/8 or ``::1``."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def connection_problem(exc: BaseException) -> str:
    """A failed connection in words a person can act on: ``tls_problem``'s, else the error's."""
    return tls_problem(exc) or _reason(exc)


def tls_problem(exc: BaseException) -> str | None:
    """What went wrong if ``exc`` is a refused certificate or a failed TLS handshake, saying what
    to check; None if it is something else."""
    certificate = _certificate_error(exc)
    if certificate is not None:
        reason = getattr(certificate, "verify_message", None) or str(certificate)
        return (
            f"its TLS certificate is not trusted by this computer ({reason}); check the address, "
            "and if the organizer signs with a certificate authority of its own, add that "
            "authority to the operating system's trusted certificates"
        )
    if isinstance(exc, aiohttp.ClientConnectorSSLError | ssl.SSLError) or isinstance(
        getattr(exc, "reason", None), ssl.SSLError
    ):
        return (
            f"the secure (TLS) connection failed ({_reason(exc)}); check that the server speaks "
            "HTTPS on that port (an http:// server needs an http:// address)"
        )
    return None


def _certificate_error(exc: BaseException) -> BaseException | None:
    """The certificate verification failure behind ``exc``, if that is what it is."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return exc.certificate_error
    seen = 0
    cause: BaseException | None = exc
    while cause is not None and seen < 8:  # urllib wraps it in URLError(reason=...)
        if isinstance(cause, ssl.SSLCertVerificationError | ssl.CertificateError):
            return cause
        reason = getattr(cause, "reason", None)
        cause = reason if isinstance(reason, BaseException) else cause.__cause__
        seen += 1
    return None


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


@functools.cache
def _truststore() -> Any:
    """The ``truststore`` module, or None (said once) when it is not installed."""
    try:
        import truststore  # noqa: PLC0415  (a missing one is survivable: see below)
    except ImportError as exc:
        log.warning(
            "the truststore package is missing (%s): HTTPS servers are checked against Python's "
            "default certificates, not the operating system's store; reinstall Barnraise to fix",
            exc,
        )
        return None
    return truststore
