"""The backbone's programs: the real ``barnraise`` command line of each, its port and its needs.

One list, read by every file that starts them (the systemd units, the compose file, the README's
commands by hand), so that they cannot drift apart. Each runs in the project's folder and names its
files relative to it. The coordinator also serves the project's public ``data/`` folder when the
manifest names the data there. A collaborative project's services are the coordinator, a DHT node that
volunteers enter the swarm through (its key kept, so its address stays the one in the manifest)
and the backbone (averaging with the volunteers, metrics, checkpoints, the leaderboard's
reports); a dmoe project has no backbone, and hosts experts on the organizer's server instead.
In a moderated project every peer refuses peers without an access pass, the DHT node's included:
there the DHT node and the helper log in to the coordinator as the organizer (the password from
``ENV_FILE``), so the coordinator starts first.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from core.config.ports import DHT_PORT
from core.coordinator import DEFAULT_PORT
from core.organize.answers import MODERATED, Answers
from core.project.dmoe import DMOE

MANIFEST = "project.toml"
DATABASE = "coordinator.db"
PROJECT_KEY = "project-key.pem"
DHT_KEY = "dht-key.pem"
BACKBONE_KEY = "backbone-key.pem"
"""The backbone's key, named in the manifest's ``access.backbone_keys``: its word confirms the
collaboration's epoch and state."""
BACKBONE_WORK = "backbone"
"""The backbone's folder: its metrics and checkpoints."""
PUBLISHED = "published"
"""Checkpoints signed for a web server to serve at ``network.checkpoint_url``."""
DATA = "data"
"""The project's public data (the demo's shards and tokenizer), which the coordinator serves at
``/data/`` unless the organizer publishes it elsewhere: it holds nothing private."""
EXPERTS = "experts"
"""A dmoe backbone's expert checkpoints."""
STATE = "state"
"""``BARNRAISE_HOME`` of the services: nothing they keep lands outside the folder."""
ENV_FILE = "services/backbone.env"
"""The organizer's password for the peer that logs in (``BARNRAISE_PASSWORD``)."""
TRUSTED_PROXIES = ("127.0.0.1/32", "::1/128")
"""The web server in front of a coordinator behind a proxy: on this machine."""
CHECKPOINT_EVERY = 10
"""Epochs between the backbone's checkpoints."""


@dataclass(frozen=True)
class Program:
    """One backbone service."""

    name: str
    """``coordinator``, ``dht``, ``backbone`` or ``experts``; the unit is ``barnraise-<name>``."""
    summary: str
    args: tuple[str, ...]
    """After ``barnraise``."""
    port: int
    """The TCP port it listens on."""
    public: bool
    """Whether the port must be open to the internet (else only to a proxy on this machine)."""
    logs_in: bool
    """Whether it logs in to the coordinator (the password from ``ENV_FILE``)."""
    after: tuple[str, ...] = ()
    """The services it starts after."""

    @property
    def unit(self) -> str:
        return f"barnraise-{self.name}"


@dataclass(frozen=True)
class Listening:
    """Where the coordinator listens, from its public URL."""

    host: str
    port: int
    behind_proxy: bool
    """True unless the public URL is ``http://`` with an explicit port: then a web server on this
    machine terminates TLS (or serves port 80/443) and forwards to the coordinator on loopback."""


def coordinator_listening(public_url: str) -> Listening:
    parts = urlsplit(public_url)
    if parts.scheme == "http" and parts.port is not None:
        return Listening("0.0.0.0", parts.port, behind_proxy=False)
    return Listening("127.0.0.1", DEFAULT_PORT, behind_proxy=True)


def programs(answers: Answers, aux_port: int) -> list[Program]:
    """The backbone of a project, in the order they start."""
    where = coordinator_listening(answers.public_url)
    coordinator = (
        "coordinator",
        "--manifest",
        MANIFEST,
        "--db",
        DATABASE,
        "--key",
        PROJECT_KEY,
        "--host",
        where.host,
        "--port",
        str(where.port),
        "--public-url",
        answers.public_url,
        # behind the proxy on this machine: its X-Forwarded-For names the client the limits count
        *(("--trusted-proxy", *TRUSTED_PROXIES) if where.behind_proxy else ()),
        # the shards and tokenizer the manifest names under <public URL>/data/
        *(("--data", DATA) if answers.serves_data else ()),
    )
    login = ("--username", answers.organizer)
    moderated = answers.mode == MODERATED
    dht: tuple[str, ...] = ("dht", "--identity", DHT_KEY, "--port", str(DHT_PORT))
    if moderated:
        # a moderated project's peers refuse any peer without a pass: the node logs in for one
        dht = (*dht, "--manifest", MANIFEST, *login)
    if answers.kind == DMOE:
        helper = Program(
            "experts",
            "expert server (hosts experts of the grid, relays for volunteers behind routers)",
            (
                "experts",
                "--manifest",
                MANIFEST,
                "--port",
                str(aux_port),
                "--checkpoints",
                EXPERTS,
                "--offer-relay",
                # no backbone here: this server gathers the evidence of poisoned calls
                "--collect-evidence",
                *login,
            ),
            aux_port,
            public=True,
            logs_in=True,
            after=("barnraise-coordinator", "barnraise-dht"),
        )
    else:
        helper = Program(
            "backbone",
            "backbone (averages with volunteers, metrics, checkpoints, leaderboard reports)",
            (
                "backbone",
                "--manifest",
                MANIFEST,
                "--port",
                str(aux_port),
                "--work-dir",
                BACKBONE_WORK,
                "--identity",
                BACKBONE_KEY,
                "--checkpoint-every",
                str(CHECKPOINT_EVERY),
                "--publish-checkpoints",
                PUBLISHED,
                "--project-key",
                PROJECT_KEY,
                *login,
            ),
            aux_port,
            public=True,
            logs_in=True,
            after=("barnraise-coordinator", "barnraise-dht"),
        )
    return [
        Program(
            "coordinator",
            "coordinator (accounts, passes, leaderboard, the project page and manifest"
            + (", the data)" if answers.serves_data else ")"),
            coordinator,
            where.port,
            public=not where.behind_proxy,
            logs_in=False,
        ),
        Program(
            "dht",
            "DHT node (where volunteers' peers enter the swarm)",
            dht,
            DHT_PORT,
            public=True,
            logs_in=moderated,
            after=("barnraise-coordinator",) if moderated else (),
        ),
        helper,
    ]
