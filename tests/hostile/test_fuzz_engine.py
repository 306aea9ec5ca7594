"""Fuzzed: whatever JSON the control API is sent, and whatever text a manifest holds, the
answer is a refusal in words (a JSON error below 500, a ``ManifestError``), never a crash.

The control API is served by a real engine daemon in this process (its own loop in a thread, the
engine tests' fast settings and in-memory keyring); requests go over loopback.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core.account import CredentialStore
from core.control import EngineDaemon
from core.policy import Preferences
from core.project import ManifestError, parse_manifest
from core.scheduler import ScriptedIdleSensor
from tests.account.memory_keyring import MemoryKeyring
from tests.project.test_manifest import edited
from tests.support.engine import fast_config, scripted_sampler

FUZZ = settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

POSTS = ["/v1/projects", "/v1/snooze", "/v1/account/login", "/v1/start", "/v1/pause"]
"""Every route that reads a body, and two that take none (``/v1/shutdown`` would end the test)."""


@dataclass
class Served:
    port: int
    token: str

    def send(self, method: str, path: str, body: bytes) -> tuple[int, str, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.getheader("Content-Type", ""), response.read()
        finally:
            connection.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A real engine daemon on its own loop in a thread, stopped at the end of the module."""
    home = tmp_path_factory.mktemp("fuzz") / "home"
    started = threading.Event()
    box: dict[str, Any] = {}

    async def serve() -> None:
        daemon = await EngineDaemon.open(
            fast_config(home),
            sampler=scripted_sampler(ScriptedIdleSensor(idle_seconds=3600.0)),
            credentials=CredentialStore(MemoryKeyring()),
        )
        stop = asyncio.Event()
        box.update(daemon=daemon, stop=stop, loop=asyncio.get_running_loop())
        started.set()
        await daemon.run(stop)

    def main() -> None:
        try:
            asyncio.run(serve())
        finally:
            started.set()

    thread = threading.Thread(target=main, name="fuzzed-engine", daemon=True)
    thread.start()
    assert started.wait(30)
    assert "daemon" in box, "the engine did not start"
    endpoint = box["daemon"].endpoint
    try:
        yield Served(int(endpoint.url.rsplit(":", 1)[1]), endpoint.token)
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(30)
        assert not thread.is_alive()


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(min_value=-(10**400), max_value=10**400),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=40),
        st.sampled_from(["", "/", "/dev/zero", ".", "resources", "09:00", "run", "cuda:99"]),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
        ),
        max_leaves=12,
    )


HIGHEST = {"idle_minutes": 10080, "leave_cores_free": 4096, "monthly_network_cap_mb": 1e9}
"""Upper bounds the README promises for a few settings."""
PREFERENCE_NAMES = [name for name, _, _ in Preferences.describe()]
FIELDS = ["manifest", "initial_peers", "data_base", "device", "local_swarm"]
FIELDS += ["minutes", "username", "password", "signup", "values"]


def _bodies() -> st.SearchStrategy[Any]:
    """Anything JSON, and objects close to what the routes take."""
    values = _json_values()
    return st.one_of(
        values,
        st.fixed_dictionaries(
            {"values": st.dictionaries(st.sampled_from(PREFERENCE_NAMES), values, max_size=4)}
        ),
        st.dictionaries(st.sampled_from(FIELDS), values, max_size=5),
    )


def _assert_a_clean_answer(status: int, kind: str, raw: bytes) -> None:
    assert status < 500, raw
    assert kind.startswith("application/json"), (status, kind, raw)
    answer = json.loads(raw)
    if status >= 400:
        assert set(answer["error"]) >= {"code", "message"}
        assert answer["error"]["message"]


DEEP_JSON = b"[" * 50_000 + b"]" * 50_000
"""Finding D: nested deeper than the JSON parser recurses."""


@FUZZ
@example(raw=DEEP_JSON, path="/v1/snooze")
@given(raw=_bodies().map(lambda body: json.dumps(body).encode()), path=st.sampled_from(POSTS))
def test_posted_bodies_never_crash_the_api(served: Served, raw: bytes, path: str) -> None:
    _assert_a_clean_answer(*served.send("POST", path, raw))


@FUZZ
@example(body={"values": {"idle_minutes": 10**400}})  # finding B: no float holds it
@example(body={"values": {"idle_minutes": 1e308}})
@given(body=_bodies())
def test_settings_bodies_never_crash_the_api(served: Served, body: Any) -> None:
    status, kind, raw = served.send("PATCH", "/v1/settings", json.dumps(body).encode())
    _assert_a_clean_answer(status, kind, raw)
    if status == 200:  # whatever was accepted is finite and within its bounds
        accepted = json.loads(raw)["data"]["values"]
        for name, high in HIGHEST.items():
            assert math.isfinite(accepted[name])
            assert accepted[name] <= high


@FUZZ
@example(raw=DEEP_JSON)
@given(raw=st.binary(max_size=200))
def test_raw_bytes_never_crash_the_api(served: Served, raw: bytes) -> None:
    _assert_a_clean_answer(*served.send("PATCH", "/v1/settings", raw))


# ---- manifests ------------------------------------------------------------------------------------

TOML_BITS = [
    "[", "]", "[[", "]]", "{", "}", "=", ".", ",", '"', "'", '"""', "'''", "\\", "#", "\n", " ",
    "a", "1", "-1", "1.5", "1e999", "nan", "inf", "true", "1979-05-27", "07:32:00",
    "project", "name", "model", "data", "sources", "urls", "training", "averaging", "access",
]  # fmt: skip
KEYS = [
    "project.name", "project.description", "model.vocab_size", "model.hidden_size",
    "model.num_heads", "model.max_position", "model.dropout", "data.seq_len",
    "data.shuffle_buffer", "data.mask_prob", "data.tokenizer", "data.tokenizer_vocab_size",
    "data.sources", "data.sources.0.urls", "data.sources.0.weight", "data.sources.0.format",
    "training.target_batch_size", "training.microbatch_size", "training.lr", "training.betas",
    "training.eps", "training.seed", "training.total_steps", "averaging.target_group_size",
    "averaging.matchmaking_time", "network.initial_peers", "network.peer_port",
    "network.coordinator_url", "access.mode", "access.project_key", "access.pass_lifetime",
]  # fmt: skip


def _only_manifest_errors(text: str) -> None:
    refused: ManifestError | None = None
    try:
        parse_manifest(text, path=Path("/fuzz/project.toml"))
    except ManifestError as error:
        refused = error
    if refused is not None:
        assert refused.reason
        assert len(str(refused)) < 2000  # a hostile value is never echoed whole


def _inline(value: Any) -> str:
    """``value`` as an inline TOML value (None, which TOML lacks, as an empty table)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string, or invalid TOML (a lone surrogate)
    if isinstance(value, list):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    items = value.items() if isinstance(value, dict) else ()
    return "{" + ", ".join(f"{json.dumps(k)} = {_inline(v)}" for k, v in items) + "}"


def _render(document: dict[str, Any]) -> str:
    """A manifest document as TOML: top-level values first, then one table per section."""
    lines = [f"{k} = {_inline(v)}" for k, v in document.items() if not isinstance(v, dict)]
    for name, table in document.items():
        if isinstance(table, dict):
            lines.append(f"[{name}]")
            lines += [f"{json.dumps(k)} = {_inline(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


@settings(max_examples=300, deadline=None, database=None)
@example(text="x = " + "[" * 5000)  # finding D: tomllib recursed into a RecursionError
@given(text=st.text(max_size=300))
def test_any_text_is_a_manifest_or_a_manifest_error(text: str) -> None:
    _only_manifest_errors(text)


@settings(max_examples=300, deadline=None, database=None)
@example(bits=["x = 1", "0" * 5000])  # more digits than Python converts: a ValueError escaped
@given(bits=st.lists(st.sampled_from(TOML_BITS), max_size=60))
def test_toml_like_text_is_a_manifest_or_a_manifest_error(bits: list[str]) -> None:
    _only_manifest_errors("".join(bits))


@settings(max_examples=300, deadline=None, database=None)
@example(edits={"model.dropout": 10**400})  # found by this test: an integer beyond any float
@given(edits=st.dictionaries(st.sampled_from(KEYS), _json_values(), min_size=1, max_size=3))
def test_any_value_in_a_valid_manifest_is_checked(edits: dict[str, Any]) -> None:
    try:
        document = edited(edits)
    except (KeyError, IndexError, TypeError, ValueError):
        return  # the edit does not fit the document's shape (a key under a scalar, say)
    _only_manifest_errors(_render(document))


def test_the_fuzzers_renderer_writes_a_valid_manifest() -> None:
    assert parse_manifest(_render(edited({}))).project.name == "test-project"
