"""The project page (``GET /``): what the project trains and why, how to join, the live figures,
the loss curve (with the held-out loss, once the backbone evaluates), the top contributors, and the
published model to download.

Everything is on the page as the server renders it, so it reads without the script; the script
then refreshes the elements marked ``data-figure``, the curve's path and the leaderboard's rows
from ``/stats``. Whatever the organizer or a volunteer wrote (the project's description, names)
is escaped by ``html``.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.coordinator.page import formats
from core.coordinator.page.curve import curve_svg
from core.coordinator.page.download import download_section
from core.coordinator.page.html import Child, Markup, el, join
from core.coordinator.page.layout import document, paragraphs
from core.coordinator.page.stats import Leader, Stats, user_url
from core.coordinator.published_model import PublishedModel
from core.modes import active_modes
from core.project import AnyManifest, DmoeManifest
from core.project.sections import LLAMA_CLM

HOMEPAGE = "https://github.com/barnraise/barnraise"
"""Barnraise's home, as the installers name it (``packaging/installer_files.py``)."""
INSTALL_GUIDE = HOMEPAGE + "#install-volunteers"
"""The README's section for volunteers."""
RELEASES = HOMEPAGE + "/releases"
INSTALLERS = (
    ("Windows", "run the setup program, no administrator needed: ", "…-windows-x64-setup.exe"),
    ("macOS", "open the disk image, drag Barnraise to Applications: ", "…-macos-universal.dmg"),
    ("Debian, Ubuntu", "", "sudo apt install ./barnraise_…_amd64.deb"),
    ("Other Linux", "unpack it, run ./barnraise in its folder: ", "…-linux-x86_64.tar.gz"),
)
"""Per system: what to do, and the file (or command) from the release page, as the README says."""


@dataclass(frozen=True, slots=True)
class Project:
    """What the page says about the project, from its manifest and coordinator."""

    name: str
    description: str
    trains: str
    join_url: str
    """The project URL with the key to pin (``#key=``): what volunteers paste."""
    moderated: bool
    allow_signup: bool

    @classmethod
    def of(cls, manifest: AnyManifest, public_url: str, project_key: str) -> Project:
        access = manifest.access
        return cls(
            manifest.project.name,
            manifest.project.description,
            what_it_trains(manifest),
            f"{public_url}/#key={project_key}",
            access.moderated,
            access.allow_signup,
        )


def what_it_trains(manifest: AnyManifest) -> str:
    """One sentence on the model, from the manifest's numbers."""
    if isinstance(manifest, DmoeManifest):
        grid, expert = manifest.grid, manifest.expert
        shape = " x ".join(str(n) for n in grid.shape)
        return (
            f"A decentralized mixture of experts: {grid.size:,} {expert.kind} experts of width "
            f"{expert.hidden} on a {shape} grid, hosted by volunteers and trained by their "
            "trainers (Learning@home)."
        )
    model, training = manifest.model, manifest.training
    if model.kind == LLAMA_CLM:
        kind = "A Llama-shaped causal language model"
    else:
        kind = "An ALBERT masked-language model"
    trained = (
        f"{kind} ({model.num_layers} layers, hidden size {model.hidden_size}, "
        f"{model.vocab_size:,} tokens, sequences of {model.max_position}), trained together by "
        "its volunteers"
    )
    return f"{trained}{active_modes().parse(training.mode).describe(training)}."


def render_home(
    project: Project,
    stats: Stats,
    *,
    poll_seconds: float,
    model: PublishedModel | None = None,
) -> Markup:
    intro = el(
        "section",
        el("h1", project.name),
        el("p", project.trains, class_="lead"),
        paragraphs(project.description),
        class_="card intro",
    )
    return document(
        f"{project.name} — a Barnraise project",
        project.name,
        intro,
        _figures(stats),
        _join(project),
        _leaders(stats),
        download_section(model),
        layout="columns",
        settings={"stats": "/stats", "poll-seconds": f"{poll_seconds:g}"},
    )


def _tile(label: str, figure: str, text: str) -> Markup:
    return el(
        "div",
        el("span", label, class_="label"),
        el("span", text, class_="value", data_figure=figure),
        class_="tile",
    )


def _figures(stats: Stats) -> Markup:
    shown = stats.display()
    tiles = el(
        "div",
        _tile("Volunteers online", "volunteers_online", shown["volunteers_online"]),
        _tile("Samples per second", "samples_per_second", shown["samples_per_second"]),
        _tile("Epoch", "epoch", shown["epoch"]),
        _tile("Samples trained", "samples", shown["samples"]),
        _tile("Loss", "loss", shown["loss"]),
        class_="tiles",
    )
    held_out = el(
        "div",
        el(
            "div",
            _tile("Held-out loss", "held_out_loss", shown["held_out_loss"]),
            _tile("Held-out accuracy", "held_out_accuracy", shown["held_out_accuracy"]),
            class_="tiles",
        ),
        el(
            "p",
            "Measured on text kept out of training, ",
            el("span", shown["held_out_when"], data_figure="held_out_when"),
            ".",
            class_="note",
        ),
        el(
            "p",
            el("span", shown["held_out_floor"], data_figure="held_out_floor"),
            ".",
            id="held-out-floor",
            class_="note",
            hidden=not shown["held_out_floor"],
        ),
        id="held-out",
        class_="held-out",
        hidden=stats.evaluation is None,
    )
    status = el(
        "p",
        el("span", shown["last_report"], data_figure="last_report"),
        el(
            "span",
            " — no recent report, so nobody is counted as online",
            id="stale",
            hidden=stats.recent,
        ),
        class_="status",
    )
    chart = el(
        "figure",
        el("figcaption", "Loss per epoch", id="curve-caption"),
        el(
            "div",
            el("span", shown["curve_top"], class_="axis", data_figure="curve_top"),
            curve_svg(stats.curve),
            el("span", shown["curve_bottom"], class_="axis", data_figure="curve_bottom"),
            class_="plot",
        ),
        el(
            "div",
            el("span", shown["curve_first"], data_figure="curve_first"),
            el("span", shown["curve_last"], data_figure="curve_last"),
            class_="xaxis",
        ),
        el(
            "p",
            el("span", "Training loss", class_="key loss"),
            el("span", "Held-out loss", class_="key held-out"),
            el(
                "span",
                "unigram floor (a model that only counts words)",
                id="floor-key",
                class_="key floor",
                hidden=stats.curve.floor is None,
            ),
            id="curve-legend",
            class_="legend",
            hidden=stats.curve.held_out_points == 0,
        ),
        el(
            "p",
            "No loss reported yet: the curve starts with the first epoch.",
            id="curve-empty",
            hidden=stats.curve.points + stats.curve.held_out_points > 0,
        ),
        class_="chart",
    )
    return el("section", el("h2", "Live"), tiles, held_out, status, chart, class_="card")


def _join(project: Project) -> Markup:
    installers = el(
        "ul",
        (
            el("li", el("strong", system), ": ", how, el("code", what))
            for system, how, what in INSTALLERS
        ),
        class_="installers",
    )
    install = el(
        "li",
        "Install Barnraise from its ",
        el("a", "release page", href=RELEASES),
        " (",
        el("a", "installation guide", href=INSTALL_GUIDE),
        "):",
        installers,
    )
    url = el(
        "div",
        el("code", project.join_url, id="project-url"),
        el("button", "Copy", type="button", id="copy-url", hidden=True),
        el("span", "", id="copy-done", role="status", class_="note"),
        class_="url",
    )
    add = el(
        "li",
        "In Barnraise, add a project and paste this project URL:",
        url,
        el(
            "p",
            "On a computer without a screen: ",
            el("code", f"barnraise ctl attach {project.join_url}"),
            class_="note",
        ),
    )
    return el(
        "section",
        el("h2", "Join"),
        el("ol", install, add, el("li", _account(project)), class_="steps"),
        class_="card join",
    )


def _account(project: Project) -> Child:
    if not project.moderated:
        return "That is all: the project is open to anyone, no account needed."
    if project.allow_signup:
        return join(
            el("strong", "An account is needed"),
            ": this project is moderated. Sign-up is open: create your account in Barnraise "
            "when you add the project.",
        )
    return join(
        el("strong", "An account is needed"),
        ": this project is moderated and sign-up is closed. Ask the organizers for an "
        "invitation, then create your account in Barnraise under the invited name.",
    )


def leader_row(leader: Leader) -> Markup:
    return el(
        "tr",
        el("td", str(leader.rank), class_="num"),
        el("td", el("a", leader.username, href=user_url(leader.username))),
        el("td", formats.count(leader.samples), class_="num"),
        el("td", formats.compute_time(leader.compute_seconds), class_="num"),
    )


def _leaders(stats: Stats) -> Markup:
    head = el(
        "tr",
        el("th", "#", scope="col", class_="num"),
        el("th", "Volunteer", scope="col"),
        el("th", "Samples", scope="col", class_="num"),
        el("th", "Compute", scope="col", class_="num"),
    )
    table = el(
        "table",
        el("thead", head),
        el("tbody", (leader_row(leader) for leader in stats.leaders), id="leaders"),
        class_="leaders",
    )
    empty = el(
        "p",
        "Nobody is on the leaderboard yet: samples count for the volunteers who train with an "
        "account.",
        id="leaders-empty",
        hidden=bool(stats.leaders),
    )
    return el(
        "section",
        el("h2", "Top contributors"),
        el("div", table, class_="scroll"),
        empty,
        el(
            "p",
            # the number leads no noun, so that 1 and 1,000 read alike ("1 volunteers" did not)
            "Volunteers on the leaderboard in all: ",
            el("span", stats.display()["contributors"], data_figure="contributors"),
            class_="note",
        ),
        class_="card",
    )
