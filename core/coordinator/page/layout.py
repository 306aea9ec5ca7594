"""The frame every HTML page of the coordinator shares, and its error pages.

A page is one document with a viewport for phones, the stylesheet, the script (``defer``, from
``/static/``: the Content-Security-Policy forbids inline script and style) and the project's name as
a header linking home. The body's ``data-*`` attributes are the script's only settings.
"""

from __future__ import annotations

from core.coordinator.page.html import Attribute, Child, Markup, el, join

STYLESHEET = "/static/page.css"
SCRIPT = "/static/page.js"
ICON = "/static/barnraise.svg"


def document(
    title: str,
    project: str,
    *content: Child,
    layout: str | None = None,
    settings: dict[str, Attribute] | None = None,
) -> Markup:
    """A whole page: ``content`` in ``<main>`` (of the stylesheet's class ``layout``, if any);
    ``settings`` become ``data-*`` of ``<body>``.
    Links of ours start at the root: a coordinator is always served at its host's root
    (``public_url``)."""
    head = el(
        "head",
        el("meta", charset="utf-8"),
        el("meta", name="viewport", content="width=device-width, initial-scale=1"),
        el("meta", name="color-scheme", content="light dark"),
        el("title", title),
        el("link", rel="stylesheet", href=STYLESHEET),
        el("link", rel="icon", href=ICON, type="image/svg+xml"),
        el("script", src=SCRIPT, defer=True),
    )
    data = {f"data_{key}": value for key, value in (settings or {}).items()}
    header = el(
        "header",
        el(
            "a",
            el("img", src=ICON, alt="", width=28, height=28),
            project,
            href="/",
            class_="home",
        ),
    )
    footer = el(
        "footer",
        "Served by the project's Barnraise coordinator. Figures come from the project's backbones.",
    )
    body = el("body", header, el("main", *content, class_=layout), footer, **data)
    return Markup("<!doctype html>\n" + el("html", head, body, lang="en") + "\n")


def error_document(project: str, status: int, headline: str, words: str) -> Markup:
    """A plain page for a refusal or a failure (the API's routes answer JSON instead)."""
    return document(
        f"{headline} — {project}",
        project,
        el(
            "section",
            el("h1", headline),
            el("p", words),
            el("p", el("a", "Back to the project's page", href="/")),
            class_="card",
        ),
        settings={"status": status},
    )


def paragraphs(text: str) -> Markup:
    """Plain text as paragraphs, split at blank lines; nothing in it becomes markup."""
    blocks = [block.strip() for block in text.replace("\r\n", "\n").split("\n\n")]
    return join(el("p", block) for block in blocks if block)
