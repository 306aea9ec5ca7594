"""core.util.web_client: the system's trust store (SSL_CERT_FILE on Linux) and proxy settings."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from core.util import web_client
from core.util.web_client import (
    client_session,
    client_ssl_context,
    connection_problem,
    is_loopback_url,
    open_url,
    tls_problem,
)
from tests.support.certificates import Pki, make_pki
from tests.support.forward_proxy import ForwardProxy

TIMEOUT = aiohttp.ClientTimeout(total=10)
PROXY_ONLY_HOST = "coordinator.test"  # .test never resolves (RFC 2606): only the proxy knows it


@pytest.fixture
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    # for 127.0.0.1 and the proxy's name, not for localhost
    return make_pki(tmp_path / "pki", dns_names=(PROXY_ONLY_HOST,))


async def _hello(request: web.Request) -> web.Response:
    return web.json_response({"hello": request.host})


@pytest.fixture
async def servers(pki: Pki) -> AsyncIterator[tuple[int, int]]:
    """The same little app over HTTPS (certificate from ``pki``) and plain HTTP: the ports."""
    app = web.Application()
    app.router.add_get("/hello", _hello)
    runner = web.AppRunner(app)
    await runner.setup()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.cert, pki.key)
    https = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    http = web.TCPSite(runner, "127.0.0.1", 0)
    await https.start()
    await http.start()
    ports = tuple(site._server.sockets[0].getsockname()[1] for site in (https, http))  # type: ignore[union-attr]
    try:
        yield ports[0], ports[1]
    finally:
        await runner.cleanup()


@pytest.fixture
async def proxy() -> AsyncIterator[ForwardProxy]:
    forward = ForwardProxy({PROXY_ONLY_HOST: "127.0.0.1"})
    await forward.start()
    try:
        yield forward
    finally:
        await forward.close()


async def _get(address: str, **kwargs: object) -> dict[str, str]:
    async with client_session(TIMEOUT, **kwargs) as session, session.get(address) as response:  # type: ignore[arg-type]
        assert response.status == 200
        body: dict[str, str] = await response.json()
        return body


def test_loopback_urls() -> None:
    for url in (
        "http://127.0.0.1:8470",
        "https://127.3.2.1/x",
        "http://[::1]:80/",
        "http://localhost",
        "http://LOCALHOST.:1",
        "http://app.localhost/",
    ):
        assert is_loopback_url(url), url
    for url in ("https://coord.example.org", "http://10.0.0.1", "http://[::2]", "not a url", ""):
        assert not is_loopback_url(url), url


def test_the_context_is_the_system_trust_store() -> None:
    import truststore

    context = client_ssl_context()
    assert isinstance(context, truststore.SSLContext)
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname


def test_without_truststore_python_defaults_are_used_and_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import builtins

    real_import = builtins.__import__

    def no_truststore(name: str, *args: object, **kwargs: object) -> object:
        if name == "truststore":
            raise ImportError("No module named 'truststore'")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    web_client._truststore.cache_clear()
    monkeypatch.setattr(builtins, "__import__", no_truststore)
    try:
        first, second = client_ssl_context(), client_ssl_context()
    finally:
        monkeypatch.undo()
        web_client._truststore.cache_clear()
    for context in (first, second):
        assert type(context) is ssl.SSLContext
        assert context.verify_mode is ssl.CERT_REQUIRED
    warnings = [r for r in caplog.records if "truststore package is missing" in r.message]
    assert len(warnings) == 1


async def test_https_is_verified_against_the_system_store(
    pki: Pki, servers: tuple[int, int], monkeypatch: pytest.MonkeyPatch, no_proxy_settings: None
) -> None:
    https_port, _ = servers
    url = f"https://127.0.0.1:{https_port}/hello"
    # without the test authority in the store: refused, in words about the certificate
    with pytest.raises(aiohttp.ClientConnectorCertificateError) as refused:
        await _get(url)
    problem = connection_problem(refused.value)
    assert "certificate is not trusted" in problem
    assert "unable to get local issuer certificate" in problem
    # the authority installed where OpenSSL looks (what an organization's IT does system-wide)
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))
    assert await _get(url) == {"hello": f"127.0.0.1:{https_port}"}
    # the name is checked too: the certificate is not for localhost
    with pytest.raises(aiohttp.ClientConnectorCertificateError) as wrong_name:
        await _get(f"https://localhost:{https_port}/hello")
    assert "Hostname mismatch" in connection_problem(wrong_name.value)


async def test_blocking_reads_use_the_same_store(
    pki: Pki, servers: tuple[int, int], monkeypatch: pytest.MonkeyPatch, no_proxy_settings: None
) -> None:
    https_port, _ = servers
    url = f"https://127.0.0.1:{https_port}/hello"
    with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED") as refused:
        await asyncio.to_thread(open_url, url, timeout=10)
    assert "certificate is not trusted" in (tls_problem(refused.value) or "")
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))

    def read() -> bytes:
        with open_url(url, timeout=10) as response:
            return response.read()

    assert b"127.0.0.1" in await asyncio.to_thread(read)


async def test_https_to_a_plain_http_port_says_so(
    servers: tuple[int, int], no_proxy_settings: None
) -> None:
    _, http_port = servers
    with pytest.raises(aiohttp.ClientConnectorSSLError) as failed:
        await _get(f"https://127.0.0.1:{http_port}/hello")
    assert "speaks HTTPS on that port" in connection_problem(failed.value)
    assert tls_problem(ConnectionRefusedError("refused")) is None
    assert connection_problem(ConnectionRefusedError("refused")) == "refused"


async def test_requests_go_through_the_environments_proxy(
    pki: Pki,
    servers: tuple[int, int],
    proxy: ForwardProxy,
    monkeypatch: pytest.MonkeyPatch,
    no_proxy_settings: None,
) -> None:
    https_port, http_port = servers
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))
    plain = f"http://{PROXY_ONLY_HOST}:{http_port}/hello"
    secure = f"https://{PROXY_ONLY_HOST}:{https_port}/hello"
    assert await _get(plain) == {"hello": f"{PROXY_ONLY_HOST}:{http_port}"}
    # HTTPS through a CONNECT tunnel, the certificate checked end to end against the store
    assert await _get(secure) == {"hello": f"{PROXY_ONLY_HOST}:{https_port}"}
    assert proxy.requests == [f"GET {plain}", f"CONNECT {PROXY_ONLY_HOST}:{https_port}"]
    # urllib (the data readers, the tokenizer) takes the same settings
    with await asyncio.to_thread(open_url, plain, timeout=10) as response:
        assert PROXY_ONLY_HOST in response.read().decode()
    assert len(proxy.requests) == 3

    # a loopback address never goes through a proxy: the proxy cannot reach our loopback
    await _get(f"http://127.0.0.1:{http_port}/hello", url=f"http://127.0.0.1:{http_port}")
    with await asyncio.to_thread(open_url, f"http://localhost:{http_port}/hello", timeout=10):
        pass
    assert len(proxy.requests) == 3
    # NO_PROXY is obeyed (urllib's proxy_bypass, which aiohttp asks)
    monkeypatch.setenv("NO_PROXY", PROXY_ONLY_HOST)
    with pytest.raises(aiohttp.ClientConnectorError):
        await _get(plain)
    assert len(proxy.requests) == 3


def test_the_connector_is_not_replaceable() -> None:
    with pytest.raises(TypeError, match="its own connector"):
        client_session(TIMEOUT, connector=None)
