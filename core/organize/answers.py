"""What ``barnraise project new`` needs to know, where each answer comes from, and the defaults.

Each answer comes from its command-line flag when one was given; else, on a terminal, from a
question that shows the default (an empty reply takes it, a bad one is explained and asked again);
else from the default. Only the data of a preset without demo data has no default. Every answer is
checked here, before anything is written, with the reason a person can act on.

The password is not among these answers: the command reads it apart (a prompt that does not echo,
``--password-stdin`` or ``$BARNRAISE_PASSWORD``), since it must never be shown as a default.
"""

from __future__ import annotations

import getpass
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar
from urllib.parse import urlsplit

from core.coordinator import DEFAULT_PORT, Username
from core.coordinator.data_files import PREFIX as DATA_PREFIX
from core.coordinator.errors import BadRequest
from core.organize.presets import DEMO, KINDS, Preset, find_preset, preset_names
from core.project import DmoeManifest, Manifest
from core.project.sections import (
    ACCESS_MODES,
    DATA_FORMATS,
    DEFAULT_KIND,
    MAX_TARGET_BATCH,
    MAX_TEXT,
    PROJECT_NAME,
)
from core.util.errors import ConfigError

MODERATED = "moderated"
DEFAULT_MODE = MODERATED
"""Volunteers sign up (open by default: ``access.allow_signup``) and train under an account, which
a moderator can ban; the backbone's DHT node and backbone log in as the organizer."""
DEFAULT_ORGANIZER = "organizer"
ATTEMPTS = 5
"""Bad replies to one question before the command gives up (a script typing into a terminal)."""
_SPLIT_URLS = re.compile(r"[\s,]+")

T = TypeVar("T")


class Asker(Protocol):
    """Asks one question on a terminal: the reply, or ``default`` for an empty one."""

    def ask(self, prompt: str, default: str) -> str: ...

    def tell(self, message: str) -> None: ...


@dataclass(frozen=True)
class Given:
    """What the command line said; None where it said nothing."""

    name: str
    kind: str = DEFAULT_KIND
    mode: str | None = None
    preset: str | None = None
    data: tuple[str, ...] | None = None
    data_format: str = "auto"
    text_field: str = "text"
    data_url: str | None = None
    target_batch: int | None = None
    public_url: str | None = None
    organizer: str | None = None
    description: str | None = None


@dataclass(frozen=True)
class Answers:
    """Everything a new project is made from, checked (except the password)."""

    name: str
    preset: Preset
    base: Manifest | DmoeManifest
    """The preset's manifest, which the new one copies where nothing was answered."""
    mode: str
    data: tuple[str, ...]
    """Shard URLs or paths (relative ones to the project's folder); empty for a dmoe project."""
    demo_data: bool
    """Whether the demo corpus and tokenizer are written into the folder (the default data)."""
    data_format: str
    text_field: str
    data_url: str | None
    """Where the organizer publishes the folder's data files (``data/``: the demo's ``shards/``
    and ``tokenizer.json``), given by ``--data-url``. None: the coordinator serves the demo's
    (``serves_data``), and data given by path stays named by its path."""
    target_batch: int | None
    """None for a dmoe project (its trainers have no collaborative batch)."""
    public_url: str
    organizer: str
    description: str

    @property
    def kind(self) -> str:
        return self.preset.kind

    @property
    def serves_data(self) -> bool:
        """Whether the coordinator serves the folder's ``data/`` at ``/data/``: the demo's data,
        when no ``--data-url`` says where else it is published."""
        return self.demo_data and self.data_url is None

    @property
    def data_base(self) -> str | None:
        """The URL the manifest names the folder's data files under (``data_url``, else the
        coordinator's ``/data/`` when it serves them); None: by their paths, which only peers on
        this computer read."""
        if self.data_url is not None:
            return self.data_url
        return self.public_url + DATA_PREFIX if self.serves_data else None

    @property
    def public_host(self) -> str:
        """The public URL's host: the backbone's DHT node is announced under it too."""
        return urlsplit(self.public_url).hostname or ""


def settle(given: Given, asker: Asker | None) -> Answers:
    """The answers from ``given``, asking ``asker`` (None: take the defaults) for the rest."""
    name = check_project_name(given.name)
    kind = given.kind
    if kind not in KINDS:
        raise ConfigError(f"unknown project kind {kind!r}; choose {' or '.join(KINDS)}")
    if kind != DEFAULT_KIND:
        _refuse_for_dmoe(given)
    mode = _answer(
        given.mode,
        asker,
        "Who may train: open (anyone) or moderated (each volunteer needs an account; you can ban)?",
        DEFAULT_MODE,
        check_mode,
    )
    preset = find_preset(kind, DEMO) if kind != DEFAULT_KIND else None
    if preset is None:
        choices = "".join(f"\n  {p:<16}{find_preset(kind, p).summary}" for p in preset_names(kind))
        preset = _answer(
            given.preset,
            asker,
            f"The model, one of:{choices}\nModel?",
            DEMO,
            lambda text: find_preset(kind, text),
        )
    elif given.preset is not None:
        find_preset(kind, given.preset)  # only the demo exists for this kind: say so if another
    base = preset.load()
    data: tuple[str, ...] = ()
    demo_data = False
    target_batch: int | None = None
    if isinstance(base, Manifest):
        data_format = check_format(given.data_format)
        text_field = check_text_field(given.text_field)
        data, demo_data = _data(given, asker, preset, data_format)
        target_batch = _answer(
            given.target_batch,
            asker,
            "Samples per collaborative step (the target batch; more: steadier, rarer steps)?",
            base.training.target_batch_size,
            lambda text: check_target_batch(text, base),
        )
    else:
        data_format, text_field = "auto", "text"
    public_url = _answer(
        given.public_url,
        asker,
        "The coordinator's public URL (what volunteers open to join)?",
        default_public_url(),
        check_public_url,
    )
    organizer = _answer(
        given.organizer,
        asker,
        "Your account name (a moderator; the backbone reports under it)?",
        default_organizer(),
        check_organizer,
    )
    description = _answer(
        given.description,
        asker,
        "One line about the project (its page shows it)?",
        base.project.description,
        check_description,
    )
    return Answers(
        name=name,
        preset=preset,
        base=base,
        mode=mode,
        data=data,
        demo_data=demo_data,
        data_format=data_format,
        text_field=text_field,
        data_url=None if given.data_url is None else check_data_url(given.data_url),
        target_batch=target_batch,
        public_url=public_url,
        organizer=organizer,
        description=description,
    )


def _refuse_for_dmoe(given: Given) -> None:
    """The options that mean nothing for a mixture of experts, refused rather than ignored."""
    for flag, value in (
        ("--data", given.data),
        ("--target-batch", given.target_batch),
    ):
        if value is not None:
            raise ConfigError(
                f"{flag} is for collaborative projects: a dmoe project's trainers learn the "
                "bundled digits (data.dataset) and have no collaborative batch"
            )


def _data(
    given: Given, asker: Asker | None, preset: Preset, data_format: str
) -> tuple[tuple[str, ...], bool]:
    """The shard URLs, and whether they are the demo's (written into the folder)."""
    if given.data is not None:
        return check_data_urls(given.data, data_format), False
    if preset.uses_demo_data:
        demo = "demo"
        answer = _answer(
            None,
            asker,
            "Data shard URLs, separated by spaces (jsonl, parquet or text; 'demo': the demo's "
            "shards, written into the project's data/ folder, which the coordinator serves)?",
            demo,
            lambda text: (
                () if text.strip() == demo else check_data_urls(split_urls(text), data_format)
            ),
        )
        return (answer, False) if answer else (_demo_urls(preset), True)
    if asker is None:
        raise ConfigError(
            f"the {preset.name} preset has no data of its own: pass --data URL ... (the shards "
            "volunteers train on: http(s):// URLs or paths relative to the project's folder)"
        )
    return (
        _ask(
            asker,
            "Data shard URLs, separated by spaces (jsonl, parquet or text shards)?",
            "",
            lambda text: check_data_urls(split_urls(text), data_format),
        ),
        False,
    )


def _demo_urls(preset: Preset) -> tuple[str, ...]:
    base = preset.load()
    assert isinstance(base, Manifest)
    return tuple(url for source in base.data.sources for url in source.urls)


def _answer(
    given: T | str | None,
    asker: Asker | None,
    prompt: str,
    default: T | str,
    parse: Callable[[str], T],
) -> T:
    """A given value (checked), else the reply to ``prompt``, else ``default`` (checked too)."""
    if given is not None:
        return parse(str(given))
    if asker is None:
        return parse(str(default))
    return _ask(asker, prompt, str(default), parse)


def _ask(asker: Asker, prompt: str, default: str, parse: Callable[[str], T]) -> T:
    for _ in range(ATTEMPTS):
        reply = asker.ask(prompt, default).strip() or default
        try:
            return parse(reply)
        except ConfigError as exc:
            asker.tell(str(exc))
    raise ConfigError(f"no usable answer after {ATTEMPTS} tries; nothing was written")


def check_project_name(text: str) -> str:
    if not PROJECT_NAME.fullmatch(text):
        raise ConfigError(
            f"the project name {text!r} must be 1 to 64 lowercase letters, digits or '-' "
            "(it names the swarm: peers of one project find each other under it)"
        )
    return text


def check_mode(text: str) -> str:
    mode = text.strip().lower()
    if mode not in ACCESS_MODES:
        raise ConfigError(
            f"answer open (anyone may train) or moderated (volunteers need an account, and "
            f"you can ban), not {text!r}"
        )
    return mode


def check_format(text: str) -> str:
    if text not in DATA_FORMATS:
        raise ConfigError(f"the data format must be one of {', '.join(DATA_FORMATS)}, not {text!r}")
    return text


def check_text_field(text: str) -> str:
    if not text or len(text) > MAX_TEXT:
        raise ConfigError(f"the text field must be 1 to {MAX_TEXT} characters")
    return text


def split_urls(text: str) -> tuple[str, ...]:
    """URLs typed on one line, separated by spaces or commas."""
    return tuple(url for url in _SPLIT_URLS.split(text.strip()) if url)


def check_data_urls(urls: Sequence[str], data_format: str) -> tuple[str, ...]:
    """Shard URLs: each a path or a file/http(s) URL whose format the format given, or else its
    name, tells."""
    urls = tuple(urls)
    if not urls:
        raise ConfigError("give at least one data shard URL")
    for url in urls:
        if not url.strip() or len(url) > MAX_TEXT:
            raise ConfigError(f"a data URL has 1 to {MAX_TEXT} characters")
        if any(ord(char) < 32 or ord(char) == 127 for char in url):
            raise ConfigError(f"the data URL {url!r} holds a control character")
        scheme = urlsplit(url).scheme.lower() if "://" in url else ""
        if scheme and scheme not in ("file", "http", "https"):
            raise ConfigError(f"{url}: use an http(s):// or file:// URL, or a path")
    if data_format == "auto":
        # imported here: core.data loads torch, which a project without data URLs never needs
        from core.data.sources import infer_format  # noqa: PLC0415

        for url in urls:
            if infer_format(url) is None:
                raise ConfigError(
                    f"cannot tell the format of {url} from its name (.jsonl, .jsonl.gz, "
                    ".parquet, .txt, .txt.gz); pass --data-format jsonl|parquet|text"
                )
    return urls


def check_target_batch(text: str, base: Manifest) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"the target batch is a whole number of samples, not {text!r}") from None
    smallest = base.training.microbatch_size
    if not smallest <= value <= MAX_TARGET_BATCH:
        raise ConfigError(
            f"the target batch must be {smallest} (the preset's microbatch) to "
            f"{MAX_TARGET_BATCH:,} samples, not {value}"
        )
    return value


def check_data_url(text: str) -> str:
    """An http(s):// URL of a folder (ending in ``/``, so that paths join under it)."""
    url = text.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ConfigError(
            f"--data-url must be the http(s):// URL of the folder that serves the project's data "
            f"files, e.g. https://data.example.org/my-project/, not {url!r}"
        )
    return url if url.endswith("/") else url + "/"


def check_public_url(text: str) -> str:
    """``http(s)://host[:port]``, without a path (the project URL is the coordinator's root)."""
    url = text.strip()
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"the public URL {url!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"the public URL must look like https://coord.example.org or http://host:8470, "
            f"not {url!r}"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ConfigError(
            f"the public URL is the coordinator's root: no path, query, fragment or user "
            f"(got {url!r}); serve it at its own host name or port"
        )
    if port == 0:
        raise ConfigError(f"the public URL {url!r} names port 0")
    return f"{parts.scheme}://{parts.netloc.lower()}"


def check_organizer(text: str) -> str:
    try:
        username = Username.parse(text)
        username.check_new()
    except BadRequest as exc:
        raise ConfigError(f"the organizer's account name: {exc}") from None
    return username.name


def check_description(text: str) -> str:
    if len(text) > MAX_TEXT:
        raise ConfigError(f"the description has at most {MAX_TEXT} characters")
    if any(ord(char) < 32 or 0xD800 <= ord(char) < 0xE000 for char in text):
        raise ConfigError("the description must be one line of text, without control characters")
    return text


def default_public_url() -> str:
    """This computer's name on the coordinator's default port."""
    return f"http://{socket.gethostname().lower() or 'localhost'}:{DEFAULT_PORT}"


def default_organizer() -> str:
    """The login name when it is a valid account name, else ``organizer``."""
    try:
        return check_organizer(getpass.getuser())
    except (ConfigError, OSError, KeyError):  # no such user entry, or a name a project refuses
        return DEFAULT_ORGANIZER
