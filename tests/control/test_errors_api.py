"""The control API's one error mapping, through the real server: each class of the engine's errors
to its status and code, storage failures as the engine's (5xx, never 400), anything unexpected as a
JSON 500 whose error id is in the log with its traceback, and aiohttp's own refusals as JSON."""

from __future__ import annotations

import errno
import logging
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from core.account import (
    AccessRefused,
    AccountError,
    CoordinatorUnavailable,
    KeyringUnavailable,
    LoginFailed,
    NotLoggedIn,
    RateLimited,
    SignupClosed,
)
from core.api import (
    API_VERSION,
    ApiError,
    AttachRequest,
    BadRequest,
    Conflict,
    CoordinatorUnreachable,
    LoginRefused,
    LoginRequired,
    NotFound,
    StorageFailed,
    TooManyAttempts,
)
from core.control.errors import ERROR_TABLE
from core.engine import errors as engine_errors
from core.engine.join.remote_manifest import ManifestRefused, ManifestUnreachable
from core.policy import PreferencesError
from core.project import ManifestError
from core.stats import LedgerError
from core.util.errors import BarnraiseError
from tests.support.engine import Running

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"

CASES: list[tuple[BaseException, int, str, type[ApiError]]] = [
    # the caller's to change
    (
        engine_errors.InvalidArgument("days must be between 1 and 3660"),
        400,
        "bad_request",
        BadRequest,
    ),
    (PreferencesError("idle_minutes must be >= 0"), 400, "bad_request", BadRequest),
    (ManifestError(Path("p.toml"), "project.name", "invalid"), 400, "bad_request", BadRequest),
    (engine_errors.DoesNotFit("2.06 TB, more than 16 GB"), 400, "bad_request", BadRequest),
    (engine_errors.UnknownProject("no project 'x'"), 404, "not_found", NotFound),
    (engine_errors.AlreadyAttached("already attached"), 409, "conflict", Conflict),
    (engine_errors.NoCoordinator("open project"), 409, "conflict", Conflict),
    (engine_errors.NotJoinedByUrl("from a file"), 409, "conflict", Conflict),
    (ManifestRefused("signed by another key"), 400, "bad_request", BadRequest),
    (
        ManifestUnreachable("the project URL does not answer"),
        502,
        "coordinator_unavailable",
        CoordinatorUnreachable,
    ),
    # the coordinator's answers
    (AccountError("the name is taken"), 400, "bad_request", BadRequest),
    (LoginFailed("wrong username or password"), 403, "login_refused", LoginRefused),
    (AccessRefused("banned"), 403, "login_refused", LoginRefused),
    (SignupClosed("sign-up is closed"), 403, "login_refused", LoginRefused),
    (NotLoggedIn("log in first"), 403, "login_required", LoginRequired),
    (RateLimited("too many attempts", 30.0), 429, "too_many_attempts", TooManyAttempts),
    (CoordinatorUnavailable("no answer"), 502, "coordinator_unavailable", CoordinatorUnreachable),
    # the engine's own storage: never the caller's fault
    (KeyringUnavailable("no keyring"), 500, "storage_failed", StorageFailed),
    (LedgerError("could not write to the ledger"), 500, "storage_failed", StorageFailed),
    (engine_errors.SettingsNotSaved("cannot write"), 500, "storage_failed", StorageFailed),
    (OSError(errno.ENOSPC, "No space left on device", "/x"), 500, "storage_failed", StorageFailed),
    (
        PermissionError(errno.EACCES, "Permission denied", "/x"),
        500,
        "storage_failed",
        StorageFailed,
    ),
    # unexpected
    (TimeoutError("took too long"), 500, "internal", ApiError),
    (RuntimeError("a bug"), 500, "internal", ApiError),
    (BarnraiseError("words for people"), 500, "internal", ApiError),
]


def _headers(engine: Running) -> dict[str, str]:
    return {"Authorization": f"Bearer {engine.endpoint.token}"}


@pytest.mark.parametrize("case", CASES, ids=lambda case: type(case[0]).__name__)
async def test_each_class_of_error_has_its_status_and_code(
    engine: Running,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    case: tuple[BaseException, int, str, type[ApiError]],
) -> None:
    error, status, code, api_class = case

    def failing() -> Any:
        raise error

    monkeypatch.setattr(engine.daemon.engine, "settings", failing)
    async with (
        aiohttp.ClientSession(headers=_headers(engine)) as http,
        http.get(f"{engine.endpoint.url}/v1/settings") as response,
    ):
        assert response.status == status
        assert response.content_type == "application/json"
        body = await response.json()
    assert body["api_version"] == API_VERSION
    assert body["error"]["code"] == code
    with pytest.raises(api_class) as raised:
        await engine.client.settings()
    assert type(raised.value) is api_class  # exactly: a 5xx is never mistaken for a refusal
    if status < 500:
        assert "id" not in body["error"]
        assert raised.value.error_id is None
        assert raised.value.message == str(error)
        return
    error_id = raised.value.error_id
    assert error_id is not None
    assert re.fullmatch(r"[0-9a-f]{8}", error_id)
    assert f"(error id {error_id})" in raised.value.message
    logged = [r for r in caplog.records if error_id in r.getMessage()]
    assert len(logged) == 1
    assert logged[0].levelno == logging.ERROR
    assert logged[0].exc_info is not None
    assert logged[0].exc_info[1] is error  # with its traceback


def test_every_error_of_the_engine_is_in_the_table() -> None:
    """A new domain error must be given its status, not fall into "unexpected"."""
    raised_by_commands = set(engine_errors.EngineError.__subclasses__())
    raised_by_commands.discard(engine_errors.ShutdownIncomplete)  # never from a command
    assert raised_by_commands <= set(ERROR_TABLE)
    assert {type(case[0]) for case in CASES} >= raised_by_commands


async def test_an_unexpected_failure_is_a_json_500_with_an_id_in_the_log(
    engine: Running, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> Any:
        raise KeyError("internal detail")

    monkeypatch.setattr(engine.daemon.engine, "history", broken)
    async with (
        aiohttp.ClientSession(headers=_headers(engine)) as http,
        http.get(f"{engine.endpoint.url}/v1/history") as response,
    ):
        assert response.status == 500
        body = await response.json()
    error = body["error"]
    assert set(body) == {"api_version", "error"}
    assert set(error) == {"code", "message", "id"}
    assert error["code"] == "internal"
    assert f"(error id {error['id']})" in error["message"]
    assert "internal detail" not in error["message"]  # the details stay in the log
    (record,) = [r for r in caplog.records if error["id"] in r.getMessage()]
    assert "GET /v1/history" in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], KeyError)
    assert (await engine.client.state()).api_version == API_VERSION  # the engine carries on


async def test_an_unwritable_settings_file_is_a_5xx_and_the_command_still_holds(
    engine: Running,
) -> None:
    await engine.client.attach(AttachRequest(str(DEMO)))
    blocker = engine.dirs.config / ".engine.toml.part"
    blocker.mkdir()  # the file the settings are written to first cannot be written (root or not)
    try:
        with pytest.raises(StorageFailed, match=r"engine\.toml.*until the engine stops") as raised:
            await engine.client.pause()
        assert raised.value.status == 500
        assert raised.value.error_id is not None
        assert (await engine.client.state()).user_paused  # carried out all the same
    finally:
        blocker.rmdir()
    assert (await engine.client.resume()).user_paused is False  # and saved again once it can be


async def test_a_ledger_that_cannot_be_used_is_a_5xx_not_the_callers_fault(
    engine: Running,
) -> None:
    engine.daemon.engine.ledger.close()  # stands in for a file that refuses reads and writes
    with pytest.raises(StorageFailed, match="ledger") as raised:
        await engine.client.statistics()
    assert raised.value.status == 500


async def test_real_refusals_keep_their_classes(engine: Running, tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match="empty"):
        await engine.client.attach(AttachRequest(" "))
    with pytest.raises(BadRequest, match="no_such_thing"):
        await engine.client.set_settings({"no_such_thing": 1})
    with pytest.raises(BadRequest, match=r"missing\.toml"):
        await engine.client.attach(AttachRequest(str(tmp_path / "missing.toml")))
    with pytest.raises(NotFound, match="nope"):
        await engine.client.detach("nope")
    with pytest.raises(Conflict, match="attach one first"):
        await engine.client.my_rank()
    with pytest.raises(BadRequest, match="limit"):
        await engine.client.leaderboard(0)
    await engine.client.attach(AttachRequest(str(DEMO)))
    with pytest.raises(Conflict, match="already attached"):
        await engine.client.attach(AttachRequest(str(DEMO)))


async def test_aiohttps_own_refusals_are_json(engine: Running) -> None:
    url = engine.endpoint.url
    async with aiohttp.ClientSession(headers=_headers(engine)) as http:
        async with http.get(f"{url}/v1/nothing-here") as response:
            assert response.status == 404
            body = await response.json()
            assert body["error"]["code"] == "not_found"
            assert body["error"]["message"].startswith("no such API call")
        async with http.get(f"{url}/v1/start") as response:  # a POST call
            assert response.status == 400
            body = await response.json()
            assert body["error"] == {
                "code": "bad_request",
                "message": "this API call does not take that method",
            }
        too_big = b'{"values": {"x": "' + b"y" * (300 * 1024) + b'"}}'
        declared = {"Content-Type": "application/json"}
        async with http.patch(f"{url}/v1/settings", data=too_big, headers=declared) as response:
            assert response.status == 400
            body = await response.json()
            assert body["error"] == {"code": "bad_request", "message": "the request is too large"}
    assert (await engine.client.settings()).values["idle_minutes"] == 3.0  # nothing changed
