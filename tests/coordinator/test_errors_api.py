"""The coordinator's one error mapping, through its real HTTP server: each refusal to its status and
code, a database that cannot be used and anything unexpected as a JSON 500 whose id is in the log
with its traceback (and in the coordinator client's error), aiohttp's own refusals as JSON."""

from __future__ import annotations

import contextlib
import logging
import re
import sqlite3
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from core.account import CoordinatorClient, CoordinatorUnavailable
from core.coordinator import errors
from core.coordinator.http import ERROR_TABLE
from tests.coordinator.conftest import PASSWORD, Running

CASES: list[tuple[Exception, int, str]] = [
    (errors.CoordinatorError("refused"), 400, "bad_request"),
    (errors.BadRequest("limit must be a whole number"), 400, "bad_request"),
    (errors.BadProof("the challenge has expired"), 400, "bad_proof"),
    (errors.Unauthorized("log in first"), 401, "unauthorized"),
    (errors.Forbidden("banned"), 403, "forbidden"),
    (errors.NotFound("there is no user 'x'"), 404, "not_found"),
    (errors.Conflict("the name is taken"), 409, "conflict"),
    (errors.TooLarge("the request body is too large"), 413, "too_large"),
    (errors.UnsupportedMediaType("send the body as JSON"), 415, "unsupported_media_type"),
    (errors.TooManyAttempts(2.5), 429, "too_many_attempts"),
    (errors.StoreError("the database /srv/c.db is not ours"), 500, "storage_failed"),
    (sqlite3.OperationalError("database or disk is full"), 500, "storage_failed"),
    (RuntimeError("a bug with private details"), 500, "internal"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: type(case[0]).__name__)
async def test_each_class_of_error_has_its_status_and_code(
    coordinator: Running,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    case: tuple[Exception, int, str],
) -> None:
    error, status, code = case

    def failing(now: float) -> list[str]:
        raise error

    monkeypatch.setattr(coordinator.service.store.passes, "revoked", failing)
    reply = await coordinator.client.get("/revocations")
    assert reply.status == status
    assert reply.body["code"] == code
    if status < 500:
        assert reply.body["error"] == str(error)
        assert "id" not in reply.body
        if isinstance(error, errors.TooManyAttempts):
            assert reply.headers["Retry-After"] == "3" == str(reply.body["retry_after"])
        if isinstance(error, errors.Unauthorized):
            assert reply.headers["WWW-Authenticate"] == "Bearer"
        return
    error_id = reply.body["id"]
    assert re.fullmatch(r"[0-9a-f]{8}", error_id)
    assert f"(error id {error_id})" in reply.body["error"]
    assert str(error) not in reply.body["error"]  # details (paths, internals) stay in the log
    (record,) = [r for r in caplog.records if error_id in r.getMessage()]
    assert "GET /revocations" in record.getMessage()
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
    assert record.exc_info[1] is error


def test_every_refusal_is_in_the_table() -> None:
    refusals = {errors.CoordinatorError, *errors.CoordinatorError.__subclasses__()}
    assert refusals <= set(ERROR_TABLE)
    assert {type(case[0]) for case in CASES} >= refusals


async def test_a_database_that_cannot_be_used_is_a_500_with_an_id_the_client_shows(
    coordinator: Running, caplog: pytest.LogCaptureFixture
) -> None:
    coordinator.add_user("alice")
    coordinator.service.store.close()  # stands in for a file that refuses reads and writes
    reply = await coordinator.client.get("/leaderboard")
    assert (reply.status, reply.body["code"]) == (500, "storage_failed")
    assert "database" in reply.body["error"]
    async with CoordinatorClient(coordinator.service.url) as client:
        with pytest.raises(CoordinatorUnavailable, match="HTTP 500") as raised:
            await client.login("alice", PASSWORD)
    (error_id,) = re.findall(r"error id ([0-9a-f]{8})", str(raised.value))  # named once
    assert any(error_id in r.getMessage() and r.exc_info for r in caplog.records)


async def test_aiohttps_own_refusals_and_a_huge_body_are_json_with_a_code(
    coordinator: Running,
) -> None:
    client = coordinator.client
    nowhere = await client.get("/no/such/thing")
    assert (nowhere.status, nowhere.body["code"]) == (404, "not_found")
    wrong_method = await client.get("/login")
    assert wrong_method.status == 405
    assert wrong_method.body == {
        "error": "this endpoint does not take that method",
        "code": "method_not_allowed",
    }
    huge = await client.request("POST", "/signup", data=b"x" * (2 * 1024 * 1024))
    assert (huge.status, huge.body["code"]) == (413, "too_large")


@contextlib.asynccontextmanager
async def _older_coordinator() -> AsyncIterator[str]:
    """A coordinator that names its failure's id in the field only."""

    async def broken(request: web.Request) -> web.Response:
        return web.json_response({"error": "internal error", "id": "c0ffee12"}, status=500)

    app = web.Application()
    app.add_routes([web.get("/revocations", broken)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_the_client_adds_an_id_the_message_does_not_name() -> None:
    async with _older_coordinator() as url, CoordinatorClient(url) as client:
        with pytest.raises(CoordinatorUnavailable) as raised:
            await client.revocations()
    assert str(raised.value).endswith("(HTTP 500: internal error (error id c0ffee12))")
