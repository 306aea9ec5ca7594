"""The project page, its live figures (``/stats``) and volunteers' pages, over HTTP against a
running coordinator: what they show after reports, escaping, error pages and headers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.coordinator.page import routes
from core.coordinator.page.home import INSTALL_GUIDE, what_it_trains
from core.coordinator.page.stats import RECENT
from core.net import Identity
from core.project import load_any_manifest
from core.util.amounts import exact_length
from tests.coordinator.page_support import Page, running_page
from tests.coordinator.test_leaderboard_api import entry

RESOURCES = Path(__file__).resolve().parents[2] / "resources"
HOSTILE = '<script>document.title="pwned"</script> & "quoted" <b>bold</b>'


def figure(page_html: str, name: str) -> str:
    """The text of the element marked ``data-figure=name``."""
    found = re.search(rf'data-figure="{name}">([^<]*)<', page_html)
    assert found, f"no figure {name}"
    return found.group(1)


async def three_epochs(page: Page) -> None:
    for epoch, loss in enumerate((5.0, 4.25, 3.5)):
        reply = await page.report(epoch, loss=loss, samples_per_second=1234.5, alive_peers=3)
        assert reply.status == 200, reply
        page.clock.advance(30)


async def test_the_page_shows_the_figures_of_the_reports(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        await three_epochs(page)
        status, html, headers = await page.text("/")
        assert status == 200
        assert headers["Content-Type"] == "text/html; charset=utf-8"
        assert figure(html, "volunteers_online") == "3"
        assert figure(html, "samples_per_second") == "1,234.5"
        assert figure(html, "epoch") == "2"
        assert figure(html, "samples") == "300"
        assert figure(html, "loss") == "3.5"
        assert figure(html, "curve_top") == "5"
        assert figure(html, "curve_bottom") == "3.5"
        path = re.search(r'<path id="loss-path"[^>]*>', html)
        assert path
        assert 'data-points="3"' in path.group(0)
        # three points, from the top left (highest loss, first epoch) to the bottom right
        assert re.search(r'd="M8\.0 8\.0 L300\.0 [0-9.]+ L592\.0 192\.0"', path.group(0))
        assert '<p id="curve-empty" hidden>' in html
        assert '<span id="stale" hidden>' in html
        # how to join: the project URL with the key to pin, and what the account needs
        assert f"{page.service.public_url}/#key={page.key.peer_id}" in html
        assert "An account is needed" in html
        assert "Sign-up is open" in html
        assert "#install-volunteers" in html


async def test_the_page_before_any_report(tmp_path: Path) -> None:
    async with running_page(tmp_path, mode="open") as page:
        status, html, _ = await page.text("/")
        assert status == 200
        assert figure(html, "epoch") == "—"
        assert figure(html, "last_report") == "no report yet"
        assert '<p id="curve-empty">' in html
        assert 'data-points="0"' in html
        assert "no account needed" in html
        assert '<p id="leaders-empty">' in html


async def test_the_page_says_how_the_project_trains(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        _, html, _ = await page.text("/")
        assert "An ALBERT masked-language model (" in html
        assert "4,096 samples a step (DeDLOC, the dedloc mode).</p>" in html
        assert "rounds of" not in html
    (tmp_path / "diloco").mkdir()
    diloco = 'mode = "diloco"\nround_seconds = 300'
    async with running_page(tmp_path / "diloco", training=diloco) as page:
        _, html, _ = await page.text("/")
        assert "trained together by its volunteers in rounds of 5 min: each computer" in html
        assert "(DiLoCo, the diloco mode).</p>" in html
        assert "samples a step" not in html
    lengths = [exact_length(s) for s in (1.0, 90.0, 120.0, 5400.0, 7200.0)]
    assert lengths == ["1 s", "90 s", "2 min", "90 min", "2 h"]


def test_the_page_names_the_kind_of_model() -> None:
    albert = what_it_trains(load_any_manifest(RESOURCES / "demo" / "project.toml"))
    assert albert.startswith("An ALBERT masked-language model (4 layers, hidden size 128, ")
    llama = what_it_trains(load_any_manifest(RESOURCES / "llama-demo" / "project.toml"))
    assert llama.startswith(
        "A Llama-shaped causal language model (4 layers, hidden size 128, 4,096 tokens, "
        "sequences of 128), trained together by its volunteers, 256 samples a step"
    )
    assert "ALBERT" not in llama
    assert "masked" not in llama


async def test_stats_serves_the_same_figures_as_json(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        await three_epochs(page)
        reply = await page.client.get("/stats")
        assert reply.status == 200
        stats = reply.body
        assert stats["epoch"] == 2
        assert stats["samples"] == 300
        assert stats["loss"] == 3.5
        assert stats["samples_per_second"] == 1234.5
        assert stats["volunteers_online"] == 3
        assert stats["recent"] is True
        assert stats["curve"]["points"] == 3
        assert stats["curve"]["epochs"] == [0.0, 2.0]
        assert stats["display"]["samples_per_second"] == "1,234.5"
        assert reply.headers["Cache-Control"] == "no-store"
        assert reply.headers["X-Content-Type-Options"] == "nosniff"


async def test_an_old_report_means_nobody_is_online(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        await three_epochs(page)
        page.clock.advance(RECENT + 1)
        stats = (await page.client.get("/stats")).body
        assert stats["recent"] is False
        assert stats["volunteers_online"] == 0
        assert stats["samples_per_second"] == 0.0
        assert stats["display"]["last_report"] == "last report 15 min ago"
        _, html, _ = await page.text("/")
        assert figure(html, "volunteers_online") == "0"
        assert '<span id="stale">' in html  # "no recent report" shows


async def test_a_report_sent_again_is_one_epoch_and_a_rerun_epoch_replaces_it(
    tmp_path: Path,
) -> None:
    async with running_page(tmp_path) as page:
        await three_epochs(page)
        again = await page.client.post(
            "/contributions",
            {"epoch": 1, "time": page.clock.time() - 60, "samples": 100, "contributions": [],
             "loss": 9.0, "samples_per_second": 1.0, "alive_peers": 1},
            token=page.token,
        )  # fmt: skip
        assert again.status == 200
        stats = (await page.client.get("/stats")).body
        assert stats["curve"]["points"] == 3
        assert stats["curve"]["losses"] == [3.5, 5.0]  # the retry of an older time changed nothing
        # trained again after a rollback: the same epoch, later
        assert (await page.report(1, loss=4.0, samples_per_second=1.0, alive_peers=2)).status == 200
        stats = (await page.client.get("/stats")).body
        assert stats["curve"]["points"] == 3
        assert stats["volunteers_online"] == 2
        rows = page.service.store.figures.losses(100)
        assert rows == [(0.0, 5.0), (1.0, 4.0), (2.0, 3.5)]


async def test_an_old_format_report_is_accepted_without_figures(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        reply = await page.report(4)
        assert reply.status == 200, reply
        assert page.service.store.figures.latest() is None
        stats = (await page.client.get("/stats")).body
        assert stats["epoch"] == 4
        assert stats["samples"] == 100
        assert stats["loss"] is None
        assert stats["display"]["loss"] == "—"
        # and a report whose loss was not finite on the peer: null, the rest kept
        assert (
            await page.report(5, loss=None, samples_per_second=3.0, alive_peers=1)
        ).status == 200
        stats = (await page.client.get("/stats")).body
        assert (stats["epoch"], stats["loss"], stats["volunteers_online"]) == (5, None, 1)
        assert stats["curve"]["points"] == 0


async def test_the_description_is_escaped(tmp_path: Path) -> None:
    description = HOSTILE + "\n\nA second paragraph with a 'single' quote."
    async with running_page(tmp_path, description=description) as page:
        _, html, _ = await page.text("/")
        assert "<script>document" not in html
        assert "<b>bold</b>" not in html
        assert (
            "<p>&lt;script&gt;document.title=&quot;pwned&quot;&lt;/script&gt; &amp; "
            "&quot;quoted&quot; &lt;b&gt;bold&lt;/b&gt;</p>"
        ) in html
        assert "<p>A second paragraph with a &#x27;single&#x27; quote.</p>" in html
        # the only script is our own file
        assert re.findall(r"<script[^>]*>", html) == ['<script src="/static/page.js" defer>']


async def test_names_the_rules_refuse_cannot_sign_up(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        for name in ("<script>", 'a"b', "a&b", "a'b", "a<b"):
            reply = await page.client.post("/signup", {"username": name, "password": "x" * 12})
            assert reply.status == 400, name


async def test_usernames_are_escaped_and_their_links_encoded(tmp_path: Path) -> None:
    """The name rules refuse markup, so a hostile name is written straight into the database
    (a legacy row, a hand edit): the page must still escape it; and a name the rules allow, in
    another script, links to its page."""
    async with running_page(tmp_path) as page:
        conn = page.service.store._conn
        for key, name, samples in (("evil", HOSTILE, 900), ("রহিম", "রহিম", 500)):
            conn.execute(
                "INSERT INTO users (key, name, password, allowlisted, created) "
                "VALUES (?, ?, NULL, 1, 1.0)",
                (key, name),
            )
            conn.execute(
                "INSERT INTO totals (user_key, samples, compute_seconds, last_seen) "
                "VALUES (?, ?, 7200.0, 1.0)",
                (key, samples),
            )
        await page.report(0, loss=1.0, samples_per_second=1.0, alive_peers=1)  # fresh figures
        _, html, _ = await page.text("/")
        assert "<script>document" not in html
        assert (
            '<a href="/u/%3Cscript%3Edocument.title%3D%22pwned%22%3C%2Fscript%3E%20%26%20'
            '%22quoted%22%20%3Cb%3Ebold%3C%2Fb%3E">&lt;script&gt;document.title=&quot;pwned'
            "&quot;&lt;/script&gt; &amp; &quot;quoted&quot; &lt;b&gt;bold&lt;/b&gt;</a>"
        ) in html
        assert '<a href="/u/%E0%A6%B0%E0%A6%B9%E0%A6%BF%E0%A6%AE">রহিম</a>' in html
        status, user_page, _ = await page.text("/u/%E0%A6%B0%E0%A6%B9%E0%A6%BF%E0%A6%AE")
        assert status == 200
        assert "<h1>রহিম</h1>" in user_page
        assert "#2" in user_page
        # the JSON carries the name as it is: the script sets it as text, never as markup
        stats = (await page.client.get("/stats")).body
        assert stats["leaderboard"][0]["username"] == HOSTILE


async def test_a_volunteers_page(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        page.add_user("alice")
        page.add_user("bob")
        page.add_user("carol")  # an account that never contributed
        alice, bob = Identity.generate(), Identity.generate()
        entries = [
            entry(alice, await pass_for_page(page, "alice", alice), 300, 3600.0),
            entry(bob, await pass_for_page(page, "bob", bob), 100, 60.0),
        ]
        reply = await page.report(0, loss=2.0, samples_per_second=5.0, alive_peers=2)
        assert reply.status == 200
        reply = await page.client.post(
            "/contributions",
            {"epoch": 1, "time": page.clock.time(), "samples": 400, "contributions": entries},
            token=page.token,
        )
        assert reply.body["accepted"] == 2, reply
        status, html, headers = await page.text("/u/alice")
        assert status == 200
        assert headers["Content-Security-Policy"].startswith("default-src 'self'")
        assert "<h1>alice</h1>" in html
        assert "#1" in html
        assert ">100<" in html  # percentile: rank 1 of 2
        assert ">300<" in html
        assert "1.0 h" in html
        assert html.count('class="bar"') == 30  # the last 30 days
        assert '<a href="/u/bob">bob</a>' in html  # the neighbour below
        # a name is case-folded as at login
        assert (await page.text("/u/ALICE"))[0] == 200
        # the project page lists both and links them
        _, home, _ = await page.text("/")
        assert '<a href="/u/alice">alice</a>' in home
        assert '<a href="/u/bob">bob</a>' in home
        # nobody, somebody who never contributed, a banned one, a name the rules refuse: one 404
        page.service.store.ban("bob", "test")
        for name in ("nobody", "carol", "bob", "%3Cscript%3E", "a" * 500):
            status, html, headers = await page.text(f"/u/{name}")
            assert status == 404, name
            assert headers["Content-Type"] == "text/html; charset=utf-8"
            assert "No such volunteer" in html
            assert "<script>" not in html


async def pass_for_page(page: Page, user: str, peer: Identity) -> str:
    session = (await page.client.login(user))["session"]
    reply = await page.client.request_pass(session, peer)
    assert reply.status == 200, reply
    text: str = reply.body["pass"]
    return text


async def test_every_answer_carries_the_security_headers(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        for path in ("/", "/stats", "/u/nobody", "/static/page.js", "/static/page.css"):
            _, _, headers = await page.text(path)
            policy = headers["Content-Security-Policy"]
            assert "default-src 'self'" in policy, path
            assert "script-src 'self'" in policy
            assert "unsafe-inline" not in policy
            assert "frame-ancestors 'none'" in policy
            assert headers["X-Content-Type-Options"] == "nosniff"


async def test_static_files_and_nothing_else(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        status, script, headers = await page.text("/static/page.js")
        assert status == 200
        assert headers["Content-Type"] == "text/javascript; charset=utf-8"
        assert "innerHTML" not in script
        status, _, headers = await page.text("/static/page.css")
        assert (status, headers["Content-Type"]) == (200, "text/css; charset=utf-8")
        status, _, headers = await page.text("/static/barnraise.svg")
        assert (status, headers["Content-Type"]) == (200, "image/svg+xml")
        for path in ("/static/nothing.js", "/static/..%2Fpage%2Fpage.js", "/static/../README.md"):
            reply = await page.client.get(path)
            assert reply.status == 404, path
            assert reply.body["code"] == "not_found"


async def test_the_poll_interval_comes_from_the_query_within_bounds(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        for query, seconds in (
            ("", "10"),
            ("?poll=0.5", "0.5"),
            ("?poll=0.01", "10"),
            ("?poll=nan", "10"),
            ("?poll=1e9", "10"),
            ("?poll=" + "9" * 100, "10"),
            ('?poll="><script>', "10"),
        ):
            status, html, _ = await page.text("/" + query)
            assert status == 200
            assert f'data-poll-seconds="{seconds}"' in html, query


async def test_a_failure_is_an_html_page_on_the_pages_and_json_on_stats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("the disk is on fire")

    monkeypatch.setattr(routes, "read_stats", broken)
    async with running_page(tmp_path) as page:
        status, html, headers = await page.text("/")
        assert status == 500
        assert headers["Content-Type"] == "text/html; charset=utf-8"
        assert "error id" in html
        assert "on fire" not in html  # the details stay in the log
        reply = await page.client.get("/stats")
        assert reply.status == 500
        assert reply.body["code"] == "internal"


def test_the_install_link_names_a_heading_of_the_readme() -> None:
    readme = Path(__file__).resolve().parents[2] / "README.md"
    headings = re.findall(r"^#+ (.+)$", readme.read_text(encoding="utf-8"), flags=re.MULTILINE)
    # GitHub's anchors: lower case, punctuation dropped, spaces become hyphens
    anchors = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
    assert INSTALL_GUIDE.split("#", 1)[1] in anchors
