"""A volunteer's page (``GET /u/<name>``): rank, percentile, samples, compute time, the days they
trained and their neighbours on the leaderboard, from ``leaderboard.Leaderboard.me``.

Only volunteers on the leaderboard have a page: an account that never contributed, a banned one or
no account at all are one and the same 404, so the page does not tell which names exist.
"""

from __future__ import annotations

from typing import Any

from core.coordinator.page import formats
from core.coordinator.page.bars import history_svg
from core.coordinator.page.html import Markup, el
from core.coordinator.page.layout import document
from core.coordinator.page.stats import user_url


def render_user(project: str, me: dict[str, Any]) -> Markup:
    """The page of a ranked volunteer (``me`` with a rank)."""
    name = str(me["username"])
    tiles = el(
        "div",
        _tile("Rank", f"#{me['rank']:,}"),
        _tile("Percentile", f"{me['percentile']:g}"),
        _tile("Samples", formats.count(int(me["samples"]))),
        _tile("Compute time", formats.compute_time(float(me["compute_seconds"]))),
        class_="tiles",
    )
    days = me["history"]["30d"]
    worked = [day for day in reversed(days) if day["samples"]]
    history = el(
        "section",
        el("h2", "The last 30 days"),
        el(
            "figure",
            history_svg(days),
            el(
                "div",
                el("span", days[0]["day"] if days else ""),
                el("span", days[-1]["day"] if days else ""),
                class_="xaxis",
            ),
            class_="chart",
        ),
        _days_table(worked)
        if worked
        else el("p", "No samples in the last 30 days.", class_="note"),
        class_="card",
    )
    neighbours = [*me["above"], *me["below"]]
    return document(
        f"{name} — {project}",
        project,
        el(
            "section",
            el("h1", name),
            el("p", f"A volunteer of {project}.", class_="lead"),
            tiles,
            class_="card",
        ),
        history,
        _neighbours(neighbours) if neighbours else None,
    )


def _tile(label: str, text: str) -> Markup:
    return el(
        "div", el("span", label, class_="label"), el("span", text, class_="value"), class_="tile"
    )


def _days_table(days: list[dict[str, Any]]) -> Markup:
    rows = (
        el(
            "tr",
            el("td", day["day"]),
            el("td", formats.count(int(day["samples"])), class_="num"),
            el("td", formats.compute_time(float(day["compute_seconds"])), class_="num"),
        )
        for day in days
    )
    head = el(
        "tr",
        el("th", "Day (UTC)", scope="col"),
        el("th", "Samples", scope="col", class_="num"),
        el("th", "Compute", scope="col", class_="num"),
    )
    return el("div", el("table", el("thead", head), el("tbody", rows)), class_="scroll")


def _neighbours(entries: list[dict[str, Any]]) -> Markup:
    rows = (
        el(
            "tr",
            el("td", str(entry["rank"]), class_="num"),
            el("td", el("a", entry["username"], href=user_url(str(entry["username"])))),
            el("td", formats.count(int(entry["samples"])), class_="num"),
        )
        for entry in sorted(entries, key=lambda entry: int(entry["rank"]))
    )
    head = el(
        "tr",
        el("th", "#", scope="col", class_="num"),
        el("th", "Volunteer", scope="col"),
        el("th", "Samples", scope="col", class_="num"),
    )
    return el(
        "section",
        el("h2", "Nearby on the leaderboard"),
        el(
            "div",
            el("table", el("thead", head), el("tbody", rows), class_="leaders"),
            class_="scroll",
        ),
        class_="card",
    )
