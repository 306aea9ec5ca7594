"""``barnraise project new``'s answers: flags first, else questions with defaults, else defaults;
every answer checked, a bad reply explained and asked again."""

from __future__ import annotations

import pytest

from core.organize import answers as answers_module
from core.organize.answers import Given, settle
from core.util.errors import ConfigError


class Script:
    """An ``Asker`` that replies from a list and records what it was asked and told."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.asked: list[tuple[str, str]] = []
        self.told: list[str] = []

    def ask(self, prompt: str, default: str) -> str:
        self.asked.append((prompt, default))
        assert self.replies, f"asked once too often: {prompt}"
        return self.replies.pop(0)

    def tell(self, message: str) -> None:
        self.told.append(message)


class Mute:
    def ask(self, prompt: str, default: str) -> str:
        raise AssertionError(f"asked {prompt!r} although a flag answered it")

    def tell(self, message: str) -> None:
        raise AssertionError(message)


def test_without_questions_every_answer_takes_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answers_module.socket, "gethostname", lambda: "Backbone-1")
    monkeypatch.setattr(answers_module.getpass, "getuser", lambda: "grace")
    settled = settle(Given(name="my-proj"), None)
    assert settled.mode == "moderated"
    assert (settled.kind, settled.preset.name) == ("collaborative", "demo")
    assert settled.demo_data
    assert settled.data == tuple(f"shards/shard-{i:05d}.jsonl.gz" for i in range(8))
    # the demo's data goes into data/, which the coordinator serves
    assert settled.serves_data
    assert settled.data_base == "http://backbone-1:8470/data/"
    assert settled.target_batch == 256  # the demo's
    assert settled.public_url == "http://backbone-1:8470"
    assert settled.public_host == "backbone-1"
    assert settled.organizer == "grace"
    assert settled.description == settled.base.project.description


def test_a_login_name_that_is_no_account_name_gives_organizer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(answers_module.getpass, "getuser", lambda: "not a name!")
    settled = settle(Given(name="p", public_url="http://h:1"), None)
    assert settled.organizer == "organizer"


def test_each_question_shows_its_default_and_asks_again_after_a_bad_reply() -> None:
    script = Script(
        "maybe",  # mode: refused
        "open",
        "huge",  # preset: refused
        "albert-large",
        "ftp://x/a.jsonl",  # data: scheme refused
        "https://ex.org/a.jsonl.gz, https://ex.org/b.parquet",
        "lots",  # target batch: not a number
        "8",  # below the preset's microbatch
        "",  # the default, 4096
        "https://coord.example.org/join",  # a path: refused
        "https://Coord.Example.org/",
        "bad name!",
        "Ada",
        "Bengali ALBERT, together",
    )
    settled = settle(Given(name="bengali"), script)
    assert settled.mode == "open"
    assert settled.preset.name == "albert-large"
    assert settled.data == ("https://ex.org/a.jsonl.gz", "https://ex.org/b.parquet")
    assert not settled.demo_data
    assert settled.target_batch == 4096
    assert settled.public_url == "https://coord.example.org"
    assert settled.organizer == "Ada"
    assert settled.description == "Bengali ALBERT, together"
    assert not script.replies
    defaults = [default for _, default in script.asked]
    assert defaults[0] == "moderated"
    assert defaults[2] == "demo"
    assert defaults[4] == ""  # albert-large has no data of its own
    assert "4096" in defaults
    told = "\n".join(script.told)
    for reason in ("not 'maybe'", "no preset 'huge'", "ftp://x/a.jsonl", "not 'lots'", "not 8"):
        assert reason in told
    assert "no path" in told
    assert "letters, digits" in told
    assert len(script.told) == 7


def test_the_demo_data_question_takes_urls_or_the_demo() -> None:
    script = Script("", "", "https://ex.org/x.txt", "", "", "", "")
    settled = settle(Given(name="p"), script)
    assert settled.data == ("https://ex.org/x.txt",)
    assert not settled.demo_data
    assert "demo" in script.asked[2][0]


def test_flags_answer_without_questions() -> None:
    settled = settle(
        Given(
            name="p",
            mode="open",
            preset="demo",
            data=("shards/a.jsonl",),
            target_batch=512,
            public_url="http://10.0.0.5:9000",
            organizer="Ada",
            description="",
        ),
        Mute(),
    )
    assert (settled.mode, settled.data, settled.target_batch) == ("open", ("shards/a.jsonl",), 512)
    assert settled.public_url == "http://10.0.0.5:9000"


def test_a_dmoe_project_asks_only_what_applies() -> None:
    script = Script("", "", "", "")  # mode, public URL, organizer, description
    settled = settle(Given(name="experts", kind="dmoe"), script)
    assert (settled.kind, settled.preset.name) == ("dmoe", "demo")
    assert settled.target_batch is None
    assert settled.data == ()
    assert len(script.asked) == 4


@pytest.mark.parametrize(
    ("given", "words"),
    [
        (Given(name="My Project"), "lowercase letters"),
        (Given(name="p", kind="dmoe", data=("a.jsonl",)), "--data is for collaborative"),
        (Given(name="p", kind="dmoe", target_batch=8), "--target-batch is for collaborative"),
        (Given(name="p", kind="dmoe", preset="albert-large"), "no preset 'albert-large'"),
        (Given(name="p", preset="albert-large"), "pass --data URL"),
        (Given(name="p", data=("https://ex.org/shard-7",)), "--data-format"),
        (Given(name="p", mode="secret"), "moderated"),
        (Given(name="p", public_url="coord.example.org"), "https://coord.example.org"),
        (Given(name="p", public_url="http://h:0"), "port 0"),
        (Given(name="p", public_url="http://h:99999"), "is not a URL"),
        (Given(name="p", public_url="http://h/#key=x"), "no path, query, fragment"),
        (Given(name="p", description="two\nlines"), "one line"),
        (Given(name="p", target_batch=0), "target batch must be 16"),
        (Given(name="p", data_url="ftp://data.example.org/"), "--data-url must be the http"),
    ],
)
def test_bad_answers_are_refused_with_the_reason(given: Given, words: str) -> None:
    given = Given(**{"public_url": "http://h:1", "organizer": "Ada", **_set(given)})
    with pytest.raises(ConfigError, match=words.replace("?", r"\?")):
        settle(given, None)


def _set(given: Given) -> dict[str, object]:
    """The fields a test set (those that differ from the defaults), so defaults can fill others."""
    blank = Given(name=given.name)
    return {k: v for k, v in vars(given).items() if k == "name" or v != getattr(blank, k)}


def test_a_format_given_accepts_any_url() -> None:
    given = Given(
        name="p",
        data=("https://ex.org/shard-7",),
        data_format="jsonl",
        public_url="http://h:1",
        organizer="Ada",
    )
    assert settle(given, None).data_format == "jsonl"


def test_a_question_without_a_usable_answer_gives_up() -> None:
    with pytest.raises(ConfigError, match="no usable answer after 5 tries; nothing was written"):
        settle(Given(name="p"), Script(*["maybe"] * 5))
