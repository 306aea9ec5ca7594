"""The control API against the real server: round trips, the token, origins, bad input, events."""

from __future__ import annotations

import asyncio
import datetime
import itertools
import os
import stat
from pathlib import Path

import aiohttp
import pytest

from core.api import (
    API_VERSION,
    AttachRequest,
    BadRequest,
    Conflict,
    Endpoint,
    EngineClient,
    EngineUnavailable,
    Event,
    NotFound,
    ProjectsChanged,
    StateChanged,
    Unauthorized,
    endpoint_path,
)
from core.control import EngineAlreadyRunning, EngineDaemon
from tests.support.engine import Running, fast_config, scripted_sampler

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"


async def test_state_settings_and_statistics_round_trip(engine: Running) -> None:
    state = await engine.client.state()
    assert state.api_version == API_VERSION
    assert state.pid == os.getpid()
    assert (state.state, state.code) == ("idle", "no_project")
    assert state.contribute is False  # starts paused until the user opts in

    settings = await engine.client.settings()
    assert settings.values["contribute"] is False
    assert settings.values["idle_minutes"] == 3.0
    assert {d.name for d in settings.descriptions} == set(settings.values)
    changed = await engine.client.set_settings({"idle_minutes": 5, "run_on_battery": True})
    assert changed.values["idle_minutes"] == 5.0
    assert changed.values["run_on_battery"] is True
    assert (await engine.client.settings()).values["idle_minutes"] == 5.0

    stats = await engine.client.statistics(days=3)
    assert stats.totals.samples == 0
    assert len(stats.days) == 3


async def test_bad_settings_are_refused_and_change_nothing(engine: Running) -> None:
    before = (await engine.client.settings()).values
    with pytest.raises(BadRequest, match="idle_minutes"):
        await engine.client.set_settings({"idle_minutes": -1, "run_on_battery": True})
    with pytest.raises(BadRequest, match="no_such_thing"):
        await engine.client.set_settings({"no_such_thing": 1})
    with pytest.raises(BadRequest, match="window"):
        await engine.client.set_settings({"window_start": "25:00", "window_end": "07:00"})
    assert (await engine.client.settings()).values == before
    with pytest.raises(BadRequest, match="minutes"):
        await engine.client.snooze(-5)
    with pytest.raises(BadRequest, match="days"):
        await engine.client.statistics(days=0)
    with pytest.raises(NotFound):
        await engine.client.statistics(project="never-attached")


async def test_commands_change_the_state_with_reasons(engine: Running) -> None:
    await engine.client.attach(AttachRequest(str(DEMO)))
    state = await engine.client.state()
    assert (state.state, state.code, state.reason) == (
        "paused",
        "not_opted_in",
        "Paused: contribution is off",
    )
    paused = await engine.client.pause()
    assert paused.user_paused
    assert paused.code in ("not_opted_in", "user_paused")
    snoozed = await engine.client.snooze(30)
    assert snoozed.snoozed_until is not None
    resumed = await engine.client.resume()
    assert not resumed.user_paused
    assert resumed.snoozed_until is None
    # the settings file keeps what the user chose
    text = (engine.dirs.config / "engine.toml").read_text()
    assert 'active = "barnraise-demo"' in text


async def test_projects_attach_and_detach(engine: Running, tmp_path: Path) -> None:
    info = await engine.client.attach(AttachRequest(str(DEMO), ["/ip4/127.0.0.1/tcp/1"]))
    assert info.name == "barnraise-demo"
    assert info.active
    assert [p.name for p in (await engine.client.projects()).projects] == ["barnraise-demo"]
    with pytest.raises(Conflict, match="already attached"):
        await engine.client.attach(AttachRequest(str(DEMO)))
    broken = tmp_path / "broken.toml"
    broken.write_text("[project]\nname = 'Not Valid!'\n")
    with pytest.raises(BadRequest, match=r"project\.name"):
        await engine.client.attach(AttachRequest(str(broken)))
    with pytest.raises(BadRequest):
        await engine.client.attach(AttachRequest(str(tmp_path / "missing.toml")))
    with pytest.raises(NotFound):
        await engine.client.detach("nope")
    assert (await engine.client.detach("barnraise-demo")).projects == []
    assert (await engine.client.state()).state == "idle"


async def test_calls_without_the_token_or_from_a_web_page_are_refused(engine: Running) -> None:
    url = engine.endpoint.url
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{url}/v1/state") as response:
            assert response.status == 401
            assert (await response.json())["error"]["code"] == "unauthorized"
        bad = {"Authorization": "Bearer " + "x" * 43}
        async with http.post(f"{url}/v1/start", headers=bad) as response:
            assert response.status == 401
        good = {"Authorization": f"Bearer {engine.endpoint.token}"}
        origin = good | {"Origin": "https://example.com"}
        async with http.post(f"{url}/v1/start", headers=origin) as response:
            assert response.status == 403
        rebinding = good | {"Host": f"evil.example:{url.rsplit(':', 1)[1]}"}
        async with http.get(f"{url}/v1/state", headers=rebinding) as response:
            assert response.status == 403
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(f"{url}/v1/events")
        assert refused.value.status == 401
        async with http.get(f"{url}/v1/state", headers=good) as response:
            assert response.status == 200
    # nothing the refused calls asked for happened
    assert (await engine.client.state()).contribute is False
    wrong = EngineClient(Endpoint(url, "wrong", 0, API_VERSION))
    with pytest.raises(Unauthorized):
        await wrong.state()
    await wrong.close()


async def test_endpoint_file_is_private_and_found(engine: Running) -> None:
    path = endpoint_path(engine.dirs)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    found = EngineClient.discover(engine.dirs)
    assert (await found.state()).pid == os.getpid()
    await found.close()


async def test_malformed_requests_get_clear_errors(engine: Running) -> None:
    headers = {"Authorization": f"Bearer {engine.endpoint.token}"}
    url = engine.endpoint.url
    async with aiohttp.ClientSession(headers=headers) as http:
        declared = {"Content-Type": "application/json"}
        async with http.patch(
            f"{url}/v1/settings", data=b"{not json", headers=declared
        ) as response:
            assert response.status == 400
            assert "JSON" in (await response.json())["error"]["message"]
        async with http.patch(f"{url}/v1/settings", data=b'{"values": {}}') as response:
            assert response.status == 415  # sent as application/octet-stream
            assert "application/json" in (await response.json())["error"]["message"]
        async with http.post(f"{url}/v1/snooze", json={"minutes": "ten"}) as response:
            assert response.status == 400
            assert "minutes" in (await response.json())["error"]["message"]
        async with http.post(f"{url}/v1/projects", json={"manifest": 3}) as response:
            assert response.status == 400
        async with http.get(f"{url}/v1/nothing-here") as response:
            assert response.status == 404


async def test_a_second_engine_names_the_first(engine: Running, tmp_path: Path) -> None:
    config = fast_config(tmp_path / "home")  # the same user folders as the running one
    with pytest.raises(EngineAlreadyRunning, match=f"pid {os.getpid()}"):
        await EngineDaemon.open(config, sampler=scripted_sampler(engine.idle))
    assert endpoint_path(engine.dirs).exists()  # the first one's endpoint is untouched


async def test_client_without_an_engine_says_so(tmp_path: Path) -> None:
    from core.config.paths import UserDirs

    with pytest.raises(EngineUnavailable, match="no engine is running"):
        EngineClient.discover(UserDirs.under(tmp_path))
    gone = EngineClient(Endpoint("http://127.0.0.1:9", "t", 1, API_VERSION), timeout=2)
    with pytest.raises(EngineUnavailable):
        await gone.state()
    await gone.close()


async def test_event_stream_delivers_state_changes_in_order(engine: Running) -> None:
    received: list[Event] = []

    async def follow() -> None:
        async for event in engine.client.events(since=0):
            received.append(event)
            if [c.code for c in _changes(received)][-1:] == ["outside_window"] and len(
                _changes(received)
            ) >= 7:
                return

    follower = asyncio.create_task(follow())
    now = datetime.datetime.now()
    closed = {  # a daily window that does not include now: opted in, yet waiting
        "window_start": (now + datetime.timedelta(hours=2)).strftime("%H:%M"),
        "window_end": (now + datetime.timedelta(hours=3)).strftime("%H:%M"),
        "contribute": True,
    }
    await engine.client.attach(AttachRequest(str(DEMO)))
    await engine.client.set_settings(closed)
    await engine.client.pause()
    await engine.client.resume()
    await engine.client.snooze(10)
    await engine.client.resume()
    await asyncio.wait_for(follower, 10)
    seqs = [e.seq for e in received]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # in order, none missing
    assert any(isinstance(e.data, ProjectsChanged) for e in received)
    changes = _changes(received)
    assert [(c.state, c.code) for c in changes] == [
        ("idle", "no_project"),
        ("paused", "not_opted_in"),
        ("waiting", "outside_window"),
        ("paused", "user_paused"),
        ("waiting", "outside_window"),
        ("paused", "snoozed"),
        ("waiting", "outside_window"),
    ]
    for before, after in itertools.pairwise(changes):
        assert after.previous == before.state  # each change starts where the last one ended
    assert changes[2].reason.startswith("Waiting: outside your hours")


def _changes(events: list[Event]) -> list[StateChanged]:
    return [e.data for e in events if isinstance(e.data, StateChanged)]
