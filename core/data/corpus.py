"""A synthetic, English-like demo corpus, so a swarm can train with no download at all.

``write_demo_corpus`` writes gzipped JSON Lines shards of short paragraphs made by a small random
grammar over a few hundred words. The text has structure a small masked language model can learn:
verbs agree with singular and plural subjects (``the fox runs``, ``the foxes run``), every animal
has its own sound, food and usual adjectives, every name keeps its pronoun, counting goes up one by
one, days follow each other, and the arithmetic of "has five, eats one, has four left" holds.

The same arguments give byte-identical files (same Python and zlib): each shard draws from its own
generator seeded by (seed, shard number), and gzip headers carry no time or file name. A manifest,
``corpus.json``, records the arguments and the files, so a second call with the same arguments
returns at once.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

from core.data.errors import DataError
from core.data.shard_files import MANIFEST, jsonl_gz, matches, read_manifest, write_atomically

_GENERATOR_VERSION = 1  # bump when the grammar changes, so that old corpora are rewritten

_SHE = ("anna", "mara", "nina", "lena", "sofia", "emma", "rosa", "ida", "clara", "julia", "vera")
_HE = ("tom", "omar", "liam", "paul", "hugo", "felix", "leo", "max", "oscar", "david", "ivan")
# singular, plural, its sound (verb stem), what it eats, its usual adjectives
_ANIMALS = (
    ("cat", "cats", "meow", "fish", ("soft", "lazy", "grey")),
    ("dog", "dogs", "bark", "bones", ("loyal", "loud", "brown")),
    ("fox", "foxes", "yelp", "eggs", ("red", "clever", "quick")),
    ("mouse", "mice", "squeak", "cheese", ("tiny", "shy", "grey")),
    ("horse", "horses", "neigh", "hay", ("strong", "tall", "fast")),
    ("goose", "geese", "honk", "bread", ("white", "noisy", "proud")),
    ("bird", "birds", "chirp", "seeds", ("small", "bright", "busy")),
    ("cow", "cows", "moo", "grass", ("big", "calm", "slow")),
    ("wolf", "wolves", "howl", "meat", ("wild", "hungry", "grey")),
    ("bear", "bears", "growl", "honey", ("huge", "brown", "sleepy")),
    ("rabbit", "rabbits", "thump", "carrots", ("fluffy", "quick", "white")),
    ("duck", "ducks", "quack", "worms", ("yellow", "wet", "happy")),
    ("frog", "frogs", "croak", "flies", ("green", "slimy", "little")),
    ("owl", "owls", "hoot", "beetles", ("wise", "silent", "old")),
    ("goat", "goats", "bleat", "leaves", ("stubborn", "hungry", "bold")),
)
_ACTIONS = ("sleep", "run", "jump", "hide", "swim", "play", "rest", "wait", "dance", "walk")
_PLACES = (
    "in the garden", "near the river", "under the old bridge", "behind the red barn",
    "on the hill", "in the forest", "by the lake", "at the farm", "in the kitchen",
    "in the field", "next to the school", "in the park", "at the market", "on the beach",
)  # fmt: skip
_TIMES = ("in the morning", "at noon", "in the evening", "at night", "after lunch", "every day")
# singular, plural, usual adjectives
_THINGS = (
    ("apple", "apples", ("red", "ripe", "crisp")),
    ("banana", "bananas", ("yellow", "sweet", "long")),
    ("lemon", "lemons", ("yellow", "sour", "fresh")),
    ("cherry", "cherries", ("red", "dark", "sweet")),
    ("plum", "plums", ("purple", "soft", "juicy")),
    ("carrot", "carrots", ("orange", "crunchy", "long")),
    ("ball", "balls", ("round", "blue", "bouncy")),
    ("book", "books", ("old", "thick", "heavy")),
    ("cup", "cups", ("empty", "white", "chipped")),
    ("hat", "hats", ("warm", "woolen", "black")),
    ("kite", "kites", ("colorful", "light", "paper")),
    ("box", "boxes", ("wooden", "heavy", "square")),
    ("lamp", "lamps", ("bright", "small", "brass")),
    ("boat", "boats", ("little", "fast", "blue")),
    ("key", "keys", ("silver", "tiny", "shiny")),
)
_WEATHER = (
    ("raining", "the ground is wet"),
    ("snowing", "the roofs are white"),
    ("sunny", "the air is warm"),
    ("windy", "the trees bend and sway"),
    ("foggy", "nobody can see far"),
    ("cold", "everyone wears a coat"),
)
_FACTS = (
    "the sky is blue", "snow is white and cold", "fire is hot", "the sun is bright",
    "the sea is deep", "grass is green", "ice is cold", "honey is sweet", "the night is dark",
    "lemons are sour", "stones are hard", "feathers are light",
)  # fmt: skip
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenty",
)  # fmt: skip


def _s(verb: str) -> str:
    """The third person singular of a regular verb stem."""
    return verb + "es" if verb.endswith(("s", "sh", "ch", "x")) else verb + "s"


class _Paragraph:
    """One paragraph's cast (a person, an animal, a place) and the sentences about them."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        female = rng.random() < 0.5
        self.name = rng.choice(_SHE if female else _HE).capitalize()
        self.they, self.their = ("she", "her") if female else ("he", "his")
        self.animal = rng.choice(_ANIMALS)
        self.place = rng.choice(_PLACES)

    def text(self) -> str:
        rng = self.rng
        makers = (
            self.animals_act, self.animal_sound, self.feeding, self.eating_count,
            self.counting, self.belongings, self.weather, self.days, self.fact, self.where,
        )  # fmt: skip
        sentences = [f"{self.name} is {self.place} {rng.choice(_TIMES)}."]
        sentences += [rng.choice(makers)() for _ in range(rng.randint(2, 5))]
        return " ".join(sentence[0].upper() + sentence[1:] for sentence in sentences)

    def animals_act(self) -> str:
        rng = self.rng
        singular, plural, _, _, adjectives = self.animal
        verb, adjective = rng.choice(_ACTIONS), rng.choice(adjectives)
        if rng.random() < 0.5:
            return f"the {adjective} {singular} {_s(verb)} {rng.choice(_PLACES)}."
        count = rng.choice(_NUMBERS[2:8])
        return f"{count} {adjective} {plural} {verb} {rng.choice(_PLACES)}."

    def animal_sound(self) -> str:
        singular, plural, sound, _, _ = self.animal
        if self.rng.random() < 0.5:
            return f"the {singular} {_s(sound)} loudly, and {self.name} laughs."
        return f"the {plural} {sound} together {self.rng.choice(_TIMES)}."

    def feeding(self) -> str:
        singular, _, _, food, adjectives = self.animal
        return f"{self.name} gives {food} to the {self.rng.choice(adjectives)} {singular}."

    def eating_count(self) -> str:
        singular, plural, _ = self.rng.choice(_THINGS[:6])  # the things one can eat
        have = self.rng.randint(2, 12)
        left = _NUMBERS[have - 1] + " " + (singular if have - 1 == 1 else plural)
        return (
            f"{self.name} has {_NUMBERS[have]} {plural}. {self.they.capitalize()} eats one, "
            f"so {self.they} has {left} left."
        )

    def counting(self) -> str:
        start = self.rng.randint(1, 14)
        run = [_NUMBERS[n] for n in range(start, start + self.rng.randint(3, 6))]
        return f"{self.name} counts {', '.join(run[:-1])} and {run[-1]}."

    def belongings(self) -> str:
        singular, _, adjectives = self.rng.choice(_THINGS[6:])
        first, second = self.rng.sample(adjectives, 2)
        return f"{self.their} {singular} is {first} and {second}."

    def weather(self) -> str:
        kind, consequence = self.rng.choice(_WEATHER)
        return f"it is {kind} today, so {consequence}."

    def days(self) -> str:
        day = self.rng.randrange(len(_DAYS))
        verb, other = self.rng.choice(_ACTIONS), self.rng.choice(_ACTIONS)
        return (
            f"on {_DAYS[day]} the {self.animal[0]} {_s(verb)}, and on "
            f"{_DAYS[(day + 1) % len(_DAYS)]} it {_s(other)}."
        )

    def fact(self) -> str:
        return f"{self.name} knows that {self.rng.choice(_FACTS)}."

    def where(self) -> str:
        return f"where is the {self.animal[0]}? It is {self.place} with {self.name}."


def _shard_bytes(seed: int, shard: int, target: int) -> tuple[bytes, int]:
    """One gzipped JSON Lines shard of at least ``target`` uncompressed bytes, and its line count."""
    rng = random.Random(f"barnraise-demo-corpus/{seed}/{shard}")  # str seeds hash stably (sha512)

    def paragraphs() -> Iterator[str]:
        size = 0
        while size < target or size == 0:
            text = _Paragraph(rng).text()
            size += len(json.dumps({"text": text})) + 1
            yield text

    return jsonl_gz(paragraphs())


def write_demo_corpus(
    directory: Path, *, shards: int = 8, megabytes: float = 4.0, seed: int = 0
) -> list[Path]:
    """Write (or find already written) ``shards`` files ``shard-00000.jsonl.gz``... in ``directory``.

    ``megabytes`` is the total uncompressed size (10^6 bytes); gzip makes the files much smaller.
    Returns the shard paths in order.
    """
    if shards < 1:
        raise DataError(f"a corpus needs at least one shard, got {shards}")
    if not megabytes > 0:
        raise DataError(f"the corpus size must be positive, got {megabytes} MB")
    directory = Path(directory)
    wanted: dict[str, object] = {
        "generator": _GENERATOR_VERSION,
        "seed": seed,
        "shards": shards,
        "megabytes": megabytes,
    }
    names = [f"shard-{index:05d}.jsonl.gz" for index in range(shards)]
    previous = read_manifest(directory / MANIFEST)
    if previous is not None and matches(previous, wanted, names, directory):
        return [directory / name for name in names]

    directory.mkdir(parents=True, exist_ok=True)
    per_shard = max(1, round(megabytes * 1_000_000 / shards))
    files = []
    for index, name in enumerate(names):
        data, lines = _shard_bytes(seed, index, per_shard)
        write_atomically(directory / name, data)
        files.append({"name": name, "bytes": len(data), "examples": lines})
    if previous is not None:  # remove shards of an earlier, larger corpus written here
        old_files = previous.get("files")
        for entry in old_files if isinstance(old_files, list) else []:
            if isinstance(entry, dict) and entry.get("name") not in names:
                (directory / str(entry.get("name"))).unlink(missing_ok=True)
    manifest = json.dumps({**wanted, "files": files}, indent=2) + "\n"
    write_atomically(directory / MANIFEST, manifest.encode())  # last: marks the corpus complete
    return [directory / name for name in names]
