"""The files that start a project's backbone: systemd units, a container image and compose file,
the password file of the peer that logs in, and a README with the ports and the steps.

Every command line comes from ``backbone.programs`` and is quoted here for where it goes: systemd's
rules (double quotes, C escapes, ``%%`` for specifiers, ``$$`` for variables) in the units, JSON
arrays in the compose file (YAML reads them as lists), a POSIX shell in the README.
"""

from __future__ import annotations

import json
import re
import shlex
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.config.environment import PASSWORD_VARIABLE
from core.config.ports import PEER_PORT
from core.organize.backbone import (
    DATA,
    ENV_FILE,
    MANIFEST,
    PUBLISHED,
    STATE,
    Listening,
    Program,
)
from core.util.errors import ConfigError

SERVICE_USER = "barnraise"
_FILES_COLUMN = 23
"""Where the notes of the README's list of files start."""
LOG_LEVEL = ("--log-level", "info")
"""What the services log (to the journal, or the container's log): each step, not each call."""
STATE_VARIABLE = "BARNRAISE_HOME"
_PLAIN = re.compile(r"[A-Za-z0-9_@+=:,./-]+")


@dataclass(frozen=True)
class Context:
    """What the files say about the project and this computer."""

    project: str
    folder: Path
    """Where the project's folder will be (absolute): the services' working directory."""
    executable: tuple[str, ...]
    """How this computer runs ``barnraise`` (an absolute path, or Python with ``-m core``)."""
    public_url: str
    project_url: str
    """The public URL with the project key pinned (``#key=``): what volunteers are given."""
    listening: Listening
    barnraise_version: str
    torch_version: str
    owner: tuple[int, int] | None
    """The folder's user and group ids, for the containers' ``user:`` (None off POSIX)."""
    data: tuple[str, ...]
    """The data the manifest names (shards, then the tokenizer), as written: a path is a file of
    this computer (relative ones in the folder), which volunteers elsewhere cannot read."""
    data_url: str | None
    """The URL the manifest names the folder's data files (``data/``) under, if any."""
    data_folder: bool = False
    """Whether the folder has a ``data/`` (the demo's shards and tokenizer)."""
    serves_data: bool = False
    """Whether ``data_url`` is the coordinator's ``/data/``: it serves ``data/`` itself."""


@dataclass(frozen=True)
class ServiceFile:
    path: str
    """Relative to the project's folder."""
    text: str
    private: bool = False
    """Readable by its owner only (0600): it holds a secret."""


def service_files(
    context: Context, programs: Sequence[Program], password: str
) -> list[ServiceFile]:
    """The ``services/`` folder's files; ``password`` goes into the env file."""
    return [
        *(
            ServiceFile(f"services/{program.unit}.service", unit_text(context, program))
            for program in programs
        ),
        ServiceFile(ENV_FILE, env_file_text(password), private=True),
        ServiceFile("services/Containerfile", containerfile_text(context)),
        ServiceFile("services/compose.yaml", compose_text(context, programs)),
        ServiceFile("services/wheels/README.txt", _WHEELS_README),
        ServiceFile("services/README.txt", readme_text(context, programs)),
    ]


# ---- systemd ----------------------------------------------------------------------------------


def systemd_word(word: str, *, variables: bool = True) -> str:
    """One word of a systemd command line or assignment, quoted so that systemd reads it back
    as it is (``variables``: ``$`` would start a variable there, as in ``ExecStart=``)."""
    _refuse_control(word)
    escaped = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    if variables:
        escaped = escaped.replace("$", "$$")
    if _PLAIN.fullmatch(word) and word != ";":
        return escaped
    return f'"{escaped}"'


def systemd_path(path: Path | str) -> str:
    """A path setting (``WorkingDirectory=``): taken whole, only specifiers need escaping."""
    text = str(path)
    _refuse_control(text)
    return text.replace("%", "%%")


def unit_text(context: Context, program: Program) -> str:
    folder = context.folder
    command = " ".join(
        systemd_word(word) for word in (*context.executable, *LOG_LEVEL, *program.args)
    )
    home = systemd_word(f"{STATE_VARIABLE}={folder / STATE}", variables=False)
    after = " ".join(("network-online.target", *(f"{unit}.service" for unit in program.after)))
    about = f"Barnraise project {context.project}: the {program.summary}."
    lines = [
        *(f"# {line}" for line in textwrap.wrap(about, 98)),
        "# Made by barnraise project new; how to install it: README.txt beside this file.",
        "[Unit]",
        f"Description=Barnraise {context.project}: {program.name}",
        # a list of URLs: the path percent-encoded (spaces), then specifiers escaped
        f"Documentation={systemd_path((folder / 'services' / 'README.txt').as_uri())}",
        f"After={after}",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"User={SERVICE_USER}",
        f"Group={SERVICE_USER}",
        f"WorkingDirectory={systemd_path(folder)}",
        f"Environment={home}",
    ]
    if program.logs_in:
        lines.append(
            f"# {PASSWORD_VARIABLE}: the organizer's password, for the login to the coordinator"
        )
        lines.append(f"EnvironmentFile={systemd_path(folder / ENV_FILE)}")
    lines += [
        f"ExecStart={command}",
        "# SIGTERM stops it cleanly (a peer after its current microbatch)",
        "KillSignal=SIGTERM",
        "TimeoutStopSec=60",
        "Restart=on-failure",
        "RestartSec=10",
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "ProtectSystem=full",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def env_file_text(password: str) -> str:
    """``BARNRAISE_PASSWORD='...'``: single quotes keep every character as it is for systemd's
    ``EnvironmentFile=``, compose's ``env_file`` and a shell's ``.`` alike."""
    check_env_password(password)
    return (
        "# The organizer's password, for the backbone's logins to the coordinator (keep private).\n"
        f"{PASSWORD_VARIABLE}='{password}'\n"
    )


def check_env_password(password: str) -> None:
    """``ConfigError`` for a password the env file cannot hold the same for all its readers."""
    if "'" in password or any(ord(char) < 32 or ord(char) == 127 for char in password):
        raise ConfigError(
            "the organizer's password goes into services/backbone.env between single quotes, for the "
            "backbone's logins: choose one without ' or control characters (nothing was written)"
        )


def _refuse_control(text: str) -> None:
    if any(ord(char) < 32 or ord(char) == 127 for char in text):
        raise ConfigError(
            f"{text!r} holds a control character, which a service file cannot carry; "
            "choose a folder and names without them (nothing was written)"
        )


# ---- containers -------------------------------------------------------------------------------


def containerfile_text(context: Context) -> str:
    return f"""\
# The image of project {context.project}'s backbone: Barnraise on Python 3.11 with torch for CPUs
# (the backbone averages and checkpoints; it trains nothing, so no GPU build is needed).
# Built from the services/ folder alone (compose.yaml does), so that no key or database of the
# project's folder is sent to the builder:  podman build -t barnraise-{context.project} services
FROM python:3.11-slim

# torch first, from PyTorch's own index of CPU builds: the default one would bring CUDA (GBs)
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu \\
        torch=={context.torch_version}

# Barnraise itself: a wheel put in services/wheels/ if there is one, else the package index
COPY wheels/ /wheels/
RUN pip install --no-cache-dir --find-links /wheels barnraise=={context.barnraise_version}

# the project's folder is mounted here (compose.yaml); everything the services keep stays in it
WORKDIR /project
ENV {STATE_VARIABLE}=/project/{STATE}
ENTRYPOINT ["barnraise"]
"""


def compose_text(context: Context, programs: Sequence[Program]) -> str:
    owner = context.owner
    user = (
        f'  user: "{owner[0]}:{owner[1]}"'
        if owner is not None
        else "  # user: the image's default (this computer has no POSIX user ids)"
    )
    lines = [
        f"# The backbone of Barnraise project {context.project}, in containers:",
        "#   podman compose -f services/compose.yaml up -d --build   (or: docker compose ...)",
        "# The ports and the rest: README.txt beside this file.",
        f"name: barnraise-{context.project}",
        "",
        "x-barnraise: &barnraise",
        "  build:",
        "    context: .",
        "    dockerfile: Containerfile",
        f"  image: barnraise-{context.project}:{context.barnraise_version}",
        "  # peers tell others the addresses they listen on: with the host's network those are",
        "  # the machine's own, reachable from the internet, not a container's private ones",
        "  network_mode: host",
        "  volumes:",
        "    - ..:/project",
        "  working_dir: /project",
        "  restart: on-failure",
        "  # the folder's owner, so that what the services write stays the organizer's",
        "  # (rootless podman: replace it with  userns_mode: keep-id)",
        user,
        "",
        "services:",
    ]
    for program in programs:
        lines += [
            f"  {program.name}:",
            "    <<: *barnraise",
            f"    command: {json.dumps([*LOG_LEVEL, *program.args])}",
        ]
        if program.logs_in:
            lines.append(f"    env_file: {json.dumps(Path(ENV_FILE).name)}")
        if program.after:
            needs = [unit.removeprefix("barnraise-") for unit in program.after]
            lines.append(f"    depends_on: {json.dumps(needs)}")
    return "\n".join(lines) + "\n"


_WHEELS_README = """\
Put a Barnraise wheel here to build the backbone's image from it (services/Containerfile installs
it instead of looking up the package index), e.g. from a checkout of Barnraise's source:

    pip wheel --no-deps -w services/wheels /path/to/barnraise
"""


# ---- README -----------------------------------------------------------------------------------


def readme_text(context: Context, programs: Sequence[Program]) -> str:
    folder = shlex.quote(str(context.folder))
    by_hand = []
    for program in programs:
        command = shlex.join([*context.executable, *program.args])
        if program.logs_in:
            command = f"(set -a; . {ENV_FILE}; set +a; exec {command})"
        by_hand.append(f"    {command}")
    unit_files = " ".join(
        shlex.quote(str(context.folder / "services" / f"{p.unit}.service")) for p in programs
    )
    table = [
        f"    {p.unit:<22} {p.port:>5}/tcp  {'internet' if p.public else 'loopback'}  "
        + f"\n{'':<48}".join(textwrap.wrap(p.summary, 52))
        for p in programs
    ]
    proxy = _proxy_text(context) if context.listening.behind_proxy else _PLAIN_HTTP
    title = f"The backbone of Barnraise project {context.project}"
    return f"""\
{title}
{"=" * len(title)}

The project URL, to give volunteers (the app's "Add project" and `barnraise ctl attach` take it):

    {context.project_url}

(It is the coordinator's public URL, {context.public_url}, with the project key after "#key=":
the app checks the project's signed manifest against that key.)

What runs, and the ports to open in the firewall (all TCP; nothing here uses UDP):

{chr(10).join(table)}

Volunteers' peers listen on {PEER_PORT}/tcp on their own computers (network.peer_port); the
backbone needs nothing open for them.
{proxy}
Start by hand, each in a terminal of its own, from the project's folder, in this order:

    cd {folder}
{chr(10).join(by_hand)}

Install as systemd services (Linux), run by a user of their own:

    sudo useradd --system --home-dir {folder} --shell /usr/sbin/nologin {SERVICE_USER}
    sudo chown -R {SERVICE_USER}:{SERVICE_USER} {folder}
    sudo systemctl enable --now {unit_files}
    journalctl -f -u {" -u ".join(p.unit for p in programs)}

The units run {shlex.join(context.executable)}: that user must be able to run it (install
Barnraise system-wide, e.g. in a virtual environment under /opt, and edit ExecStart= if it moves).

Or in containers (Linux, host networking), from the project's folder:

    podman compose -f services/compose.yaml up -d --build     (or: docker compose ...)

The image installs Barnraise {context.barnraise_version} from services/wheels/ if you put its wheel
there, else from the package index; see services/wheels/README.txt.

Files:

    {MANIFEST:<18} the manifest (commented); check it and its data: barnraise project check {MANIFEST}
    project-key.pem    the project key (private): signs passes, checkpoints and the manifest
    dht-key.pem        the DHT node's key: keeps its address the one in network.initial_peers
    backbone-key.pem   the backbone's key (private), named in access.backbone_keys: its word
                       confirms the model's epoch and state to every volunteer
    coordinator.db     accounts (yours is a moderator), passes, the leaderboard
    {ENV_FILE:<18} your password (private), for the backbone's logins to the coordinator
    {PUBLISHED + "/":<18} checkpoints signed by the project key: serve this folder over HTTPS and
                       put its URL in network.checkpoint_url, so that a volunteer who finds nobody
                       else starts from the latest one
    {STATE + "/":<18} what the services keep of their own
{_data_files(context)}{_data_text(context)}"""


_PLAIN_HTTP = """
The public URL is plain HTTP: fine on a LAN or for a trial, but on the internet passwords and
session tokens would cross it readable. For a real project, give an https:// public URL (a web
server on this machine then forwards to the coordinator; make the project again with it).
"""


def _proxy_text(context: Context) -> str:
    port = context.listening.port
    return f"""
The public URL is served by a web server on this machine (HTTPS, or port 80), which forwards to
the coordinator on 127.0.0.1:{port}. For example, with Caddy (it gets the certificate itself):

    {context.public_url.split("://", 1)[1]} {{
        reverse_proxy 127.0.0.1:{port}
    }}

Open 80/tcp and 443/tcp for it. (Or let the coordinator serve HTTPS itself: give its command
--tls-cert FILE --tls-key FILE, --host 0.0.0.0 and a port open in the firewall, without
--trusted-proxy, and put that port in the public URL.)
"""


def _data_files(context: Context) -> str:
    """The ``Files`` line of ``data/``, when the folder has one."""
    if not context.data_folder:
        return ""
    where = "served by the coordinator at" if context.serves_data else "to publish at"
    said = (
        f"the project's public data (the demo's shards/ and tokenizer.json): put nothing "
        f"private in it; {where} {context.data_url}"
    )
    lines = textwrap.wrap(said, 100 - _FILES_COLUMN, break_on_hyphens=False)
    first = f"    {DATA + '/':<18} "
    return first + f"\n{'':<{_FILES_COLUMN}}".join(lines) + "\n"


def _data_text(context: Context) -> str:
    paths = [url for url in context.data if "://" not in url]
    keep_safe = (
        "Serve copies (or links) of them from a folder of their own, never this folder, which\n"
        "holds the project key and the accounts; the server must answer range requests (Caddy's\n"
        "file_server and nginx do)."
    )
    if paths:
        return f"""
Data: the manifest names {len(paths)} file(s) by their paths here (e.g. {paths[0]}). Peers on
this computer read them; volunteers who join by the project URL need http(s):// URLs (the app
refuses paths on your disk). {keep_safe}
Then name them by URL in {MANIFEST} (or make the project again with --data-url URL) and run
`barnraise project check {MANIFEST}`.
"""
    if context.serves_data:
        said = (
            f"Data: the manifest names the files under {DATA}/ at {context.data_url} and the "
            f"coordinator serves them there (its --data {DATA}), where volunteers' peers download "
            f"them by byte ranges. Only regular files under {DATA}/ are served, never the rest "
            f"of this folder, nor hard links or files named like secrets (keys, passwords, "
            f"databases). Your own data instead: put its shards in {DATA}/ and list their "
            f"URLs under {context.data_url} in {MANIFEST}, or give the URLs where they are "
            f"published already (and drop --data {DATA} from the coordinator's command). Either "
            f"way, `barnraise project check {MANIFEST}` then tries every one, with the "
            "coordinator running."
        )
        return "\n" + textwrap.fill(said, 98, break_on_hyphens=False) + "\n"
    if context.data_url is None:
        return ""
    what = (
        f"the contents of {DATA}/ there ({DATA}/shards/ as shards/, and tokenizer.json)"
        if context.data_folder
        else "them there, at the paths the manifest adds to it"
    )
    return f"""
Data: the manifest names this project's data files under {context.data_url}, where volunteers'
peers download them: publish {what}. {keep_safe}
Then `barnraise project check {MANIFEST}` tries every one.
"""
