"""``create_project``: a new project's folder from the organizer's answers.

In order: the answers and the password are checked; the project key and the DHT node's key are
made; the manifest is built from the preset with the answers (and validated: the sections check
themselves), written as commented TOML, and read back to prove it is the same manifest; then, in
a staging folder that is moved into place only when all is written (``folder``), come the files:

- ``project.toml``      the manifest; ``access.project_key`` is the new key's PeerID,
  ``network.coordinator_url`` the public URL, ``network.initial_peers`` the backbone's DHT node
- ``project-key.pem``   the project key (0600), as ``barnraise coordinator`` would make it
- ``dht-key.pem``       the DHT node's key (0600): its address stays the one in the manifest
- ``backbone-key.pem``  the backbone's key (0600), named in ``access.backbone_keys``: its word
  confirms the collaboration's epoch and state (a collaborative project's only)
- ``coordinator.db``    the coordinator's database with the organizer's moderator account, made as
  ``barnraise coordinator users add --moderator --password-stdin`` makes one
- ``services/``         systemd units, the password file, a Containerfile, compose.yaml, README
- ``data/``             the demo corpus (``shards/``) and its tokenizer, when the demo's data is
  used: public files only, which the coordinator serves at ``/data/`` (the manifest names them
  there) unless ``--data-url`` names where the organizer publishes them
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urljoin

from core import __version__
from core.config.ports import DHT_PORT
from core.coordinator import DEFAULT_PARAMS, CoordinatorStore, Password, ScryptParams
from core.coordinator.errors import BadRequest
from core.net.host.address import PeerAddress
from core.organize.answers import MODERATED, Answers
from core.organize.backbone import (
    BACKBONE_KEY,
    DATA,
    DATABASE,
    DHT_KEY,
    MANIFEST,
    PROJECT_KEY,
    Program,
    coordinator_listening,
    programs,
)
from core.organize.folder import PROJECT_FOLDER
from core.organize.manifest_text import manifest_text
from core.organize.services import Context, check_env_password, service_files
from core.project import (
    AnyManifest,
    Manifest,
    NetworkSection,
    SourceSection,
    load_manifest,
    parse_any_manifest,
)
from core.project.dmoe import DMOE
from core.project.sections import DEFAULT_KIND
from core.swarm.demo_data import DEMO_MANIFEST, prepare_demo_data
from core.trust.identity import Identity
from core.util.errors import ConfigError
from core.util.files.atomic import write_atomically
from core.util.files.staged_folder import StagedFolder

TORCH_FALLBACK = "2.13.0"
"""The torch the container image installs when this computer has none (the tested series)."""


@dataclass(frozen=True)
class NewProject:
    """What ``create_project`` made."""

    folder: Path
    manifest: AnyManifest
    project_url: str
    """The public URL with the project key pinned: what volunteers are given."""
    written: list[str]
    """The files, relative to the folder."""
    programs: list[Program]


def create_project(
    answers: Answers,
    password: str,
    folder: Path,
    *,
    demo_cache: Path,
    params: ScryptParams = DEFAULT_PARAMS,
    executable: tuple[str, ...] | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> NewProject:
    """Write the project's folder at ``folder`` (absent or empty). ``demo_cache``: where the demo
    corpus is made once and copied from; ``executable``: how the services run ``barnraise``
    (default: the one running now). ``ConfigError`` (nothing written) for anything wrong."""
    folder = folder.expanduser().absolute()
    check_password(password)
    project_key = Identity.generate()
    dht_key = Identity.generate()
    backbone_key = Identity.generate() if answers.kind != DMOE else None
    dht_address = str(PeerAddress.tcp(answers.public_host, DHT_PORT, dht_key.peer_id))
    manifest = build_manifest(
        answers,
        str(project_key.peer_id),
        dht_address,
        backbone=None if backbone_key is None else str(backbone_key.peer_id),
    )
    text = manifest_text(manifest, _header(answers))
    _check_reads_back(text, manifest, folder / MANIFEST)
    project_url = f"{answers.public_url}/#key={project_key.peer_id}"
    backbone = programs(answers, manifest.network.aux_port)
    context = Context(
        project=answers.name,
        folder=folder,
        executable=executable or barnraise_executable(),
        public_url=answers.public_url,
        project_url=project_url,
        listening=coordinator_listening(answers.public_url),
        barnraise_version=__version__,
        torch_version=_torch_version(),
        owner=(os.getuid(), os.getgid()) if hasattr(os, "getuid") else None,
        data=_data_named(manifest),
        data_url=answers.data_base,
        data_folder=answers.demo_data,
        serves_data=answers.serves_data,
    )
    files = service_files(context, backbone, password)
    written: list[str] = []
    stage = StagedFolder(folder, PROJECT_FOLDER)
    with stage as staging:
        _write(staging / MANIFEST, text.encode("utf-8"), private=False)
        written.append(MANIFEST)
        keys = [(project_key, PROJECT_KEY), (dht_key, DHT_KEY)]
        if backbone_key is not None:
            keys.append((backbone_key, BACKBONE_KEY))
        for key, name in keys:
            key.save(staging / name)  # 0600, as every identity file
            written.append(name)
        _add_organizer(staging / DATABASE, answers.organizer, password, params)
        written.append(DATABASE)
        for file in files:
            target = staging / file.path
            target.parent.mkdir(parents=True, exist_ok=True)
            _write(target, file.text.encode("utf-8"), private=file.private)
            written.append(file.path)
        if answers.demo_data:
            progress(f"writing the demo's shards and tokenizer (made once in {demo_cache})")
            written += [f"{DATA}/{name}" for name in _copy_demo_data(demo_cache, staging / DATA)]
        stage.commit()  # the last step: until here, a failure leaves nothing behind
    return NewProject(folder, manifest, project_url, written, backbone)


def build_manifest(
    answers: Answers, project_key: str, dht_address: str, *, backbone: str | None = None
) -> AnyManifest:
    """The preset's manifest with the answers in it, validated by its sections; ``backbone``:
    the PeerID of the backbone's key, which confirms the collaboration's state."""
    base = answers.base
    project = dataclasses.replace(base.project, name=answers.name, description=answers.description)
    network = NetworkSection(
        initial_peers=(dht_address,),
        coordinator_url=answers.public_url,
        checkpoint_url="",
        peer_port=base.network.peer_port,
        aux_port=base.network.aux_port,
    )
    access = dataclasses.replace(
        base.access,
        mode=answers.mode,
        project_key=project_key,
        # volunteers sign up from the app; an organizer who wants invitations only says false
        allow_signup=True,
        backbone_keys=() if backbone is None else (backbone,),
    )
    changes: dict[str, object] = {"project": project, "network": network, "access": access}
    if isinstance(base, Manifest):
        source = SourceSection(
            urls=tuple(served(url, answers.data_base) for url in answers.data),
            format=answers.data_format,
            text_field=answers.text_field,
        )
        changes["data"] = dataclasses.replace(
            base.data,
            sources=(source,),
            tokenizer=served(base.data.tokenizer, answers.data_base),
        )
        # the demo's held-out modules go with its data; an organizer's own data has none yet
        held_out = base.evaluation.urls if answers.demo_data else ()
        changes["evaluation"] = dataclasses.replace(
            base.evaluation, urls=tuple(served(url, answers.data_base) for url in held_out)
        )
        if answers.target_batch is not None:
            changes["training"] = dataclasses.replace(
                base.training, target_batch_size=answers.target_batch
            )
    return dataclasses.replace(base, path=None, **changes)  # type: ignore[arg-type]


def _data_named(manifest: AnyManifest) -> tuple[str, ...]:
    """The shards and tokenizer the manifest names (none for a dmoe project's bundled data)."""
    if not isinstance(manifest, Manifest):
        return ()
    shards = (url for s in manifest.data.sources for url in s.urls)
    return (*shards, *manifest.evaluation.urls, manifest.data.tokenizer)


def served(path: str, data_url: str | None) -> str:
    """``path`` as volunteers reach it: a relative path joined under ``data_url`` (if given)."""
    if data_url is None or "://" in path or Path(path).is_absolute():
        return path
    return urljoin(data_url, quote(path))


def barnraise_executable() -> tuple[str, ...]:
    """The ``barnraise`` beside this Python (absolute), else the one on PATH, else ``python -m``."""
    for where in (str(Path(sys.executable).parent), None):
        found = shutil.which("barnraise", path=where)
        if found:
            return (str(Path(found).absolute()),)
    return (sys.executable, "-m", "core")


def check_password(password: str) -> None:
    """``ConfigError`` unless ``password`` may be the organizer's (the account's rules, and the
    env file's: ``services.check_env_password``)."""
    try:
        Password.parse(password)
    except BadRequest as exc:
        raise ConfigError(f"the organizer's password: {exc}") from None
    check_env_password(password)


def _check_reads_back(text: str, manifest: AnyManifest, path: Path) -> None:
    """The written text is the manifest: a mismatch is a bug of the writer, caught before use."""
    parsed = parse_any_manifest(text, path=path)
    if dataclasses.replace(parsed, path=None) != manifest:
        raise ConfigError(
            "the manifest written for the new project reads back differently (a bug in "
            "barnraise project new; please report it); nothing was written"
        )


def _header(answers: Answers) -> list[str]:
    day = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    access = (
        "moderated: volunteers need an account and a pass"
        if answers.mode == MODERATED
        else "open: anyone may train"
    )
    rules = "core/project/sections.py"
    if answers.kind != DEFAULT_KIND:
        rules += " and core/project/dmoe_sections.py"
    made = f"made by barnraise project new on {day} from the {answers.preset.name} preset"
    return [
        f"{answers.name} ({answers.kind}): {made}; {access}.",
        f"Every key is here with a note on why; the rules (types, ranges, defaults) are in {rules}.",
        "Peers must agree on the model and training: change them only before the first run.",
        f"Check this file and its data with: barnraise project check {MANIFEST}",
    ]


def _write(path: Path, data: bytes, *, private: bool) -> None:
    # Windows has no such permission bits: there a user's own folder keeps files private
    mode = None if os.name != "posix" else (0o600 if private else 0o644)
    write_atomically(path, lambda out: out.write(data), prefix=f".{path.name}-", mode=mode)


def _add_organizer(db: Path, name: str, password: str, params: ScryptParams) -> None:
    """The organizer's account, a moderator, as ``coordinator users add --moderator`` adds it."""
    with CoordinatorStore(db) as store:
        store.add_user(name, password, moderator=True, params=params)


def _copy_demo_data(cache: Path, folder: Path) -> list[str]:
    """The demo's shards and tokenizer, made once in ``cache`` (``barnraise swarm``'s maker)."""
    demo = load_manifest(DEMO_MANIFEST)
    prepare_demo_data(demo, cache)
    names = [url for source in demo.data.sources for url in source.urls]
    names += [*demo.evaluation.urls, demo.data.tokenizer]
    for name in names:
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cache / name, target)
    return names


def _torch_version() -> str:
    """The torch release here without its build tag (``2.13.0+cpu``: ``2.13.0``)."""
    try:
        return importlib.metadata.version("torch").split("+", 1)[0]
    except importlib.metadata.PackageNotFoundError:
        return TORCH_FALLBACK
