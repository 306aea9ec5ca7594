"""ModeratedSwarm: the local swarm run as a moderated project, with its own coordinator.

For ``barnraise swarm --moderated`` the swarm makes a project key, starts the coordinator inside
its own process (on loopback, on a port the system chooses), opens accounts for an organizer (a
moderator, whom the backbone logs in as to report epochs) and two volunteers, and writes a
moderated copy of the manifest that names the key and the coordinator (relative data paths still
resolve against the shard server's URL). Trainer peers log in as the volunteers in turn. At the end
its ``standings`` are the leaderboard and whether its total adds up to the samples the
backbone counted.

The copy allows sign-up: it is a local demo, and anyone at this computer (the desktop app's user,
joining through the engine) may create an account at its coordinator. Each run starts a new
coordinator database, unless ``keep_accounts`` (what the desktop app asks for): then the accounts
made in earlier runs stay, so a volunteer who signed up logs in again, while the leaderboard still
starts afresh (the collaboration counts its epochs from 0 again).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.account import CoordinatorClient
from core.coordinator import CoordinatorService
from core.project import AnyManifest, load_any_manifest, parse_any_manifest
from core.trust.identity import Identity
from core.util.files import toml_write

VOLUNTEERS = ("alice", "bob")
ORGANIZER = "organizer"


@dataclass
class ModeratedSwarm:
    service: CoordinatorService
    manifest_path: Path
    passwords: dict[str, str] = field(repr=False)

    def user_for_peer(self, index: int) -> str:
        return VOLUNTEERS[index % len(VOLUNTEERS)]


async def start_coordinator(
    manifest_path: Path, work: Path, *, keep_accounts: bool = False
) -> ModeratedSwarm:
    """A coordinator for this run (fresh, or with the last run's accounts), its accounts for the
    swarm's own peers, and the moderated manifest the peers use."""
    key, document, database = await asyncio.to_thread(_prepare, manifest_path, work, keep_accounts)
    service = CoordinatorService(_manifest(document, manifest_path), database, key)
    await service.start("127.0.0.1", 0)
    try:
        if keep_accounts:
            service.store.start_new_leaderboard()
        document["network"]["coordinator_url"] = service.url
        moderated = work / "moderated.toml"
        await asyncio.to_thread(write_manifest, moderated, document)
        passwords = {name: secrets.token_urlsafe(18) for name in (ORGANIZER, *VOLUNTEERS)}
        for name, password in passwords.items():
            service.store.add_user(name, password, moderator=name == ORGANIZER)
    except BaseException:
        await service.close()
        raise
    return ModeratedSwarm(service, moderated, passwords)


def _prepare(
    manifest_path: Path, work: Path, keep_accounts: bool
) -> tuple[Identity, dict[str, Any], Path]:
    folder = work / "coordinator"
    folder.mkdir(parents=True, exist_ok=True)
    key = Identity.load_or_create(folder / "project-key.pem")
    database = folder / "coordinator.db"
    if not keep_accounts:
        for suffix in ("", "-wal", "-shm"):  # each demo run starts its own leaderboard
            database.with_name(database.name + suffix).unlink(missing_ok=True)
    document = tomllib.loads(manifest_path.read_text(encoding="utf-8"))
    document.setdefault("access", {}).update(
        mode="moderated",
        project_key=str(key.peer_id),
        refresh_interval=5.0,
        pass_lifetime=300.0,
        allow_signup=True,
    )
    # the URL is not known before the service listens, and the service does not read it
    document.setdefault("network", {})["coordinator_url"] = "http://127.0.0.1:1"
    return key, document, database


def write_manifest(path: Path, document: dict[str, Any]) -> None:
    """Write a swarm's copy of its manifest, checked as its peers will read it."""
    # whole or not at all: an engine on this computer may be reading the previous run's copy
    partial = path.with_name(f".{path.name}.part")
    partial.write_text(toml_write.dumps(document), encoding="utf-8")
    load_any_manifest(partial)  # the peers will: fail here, clearly, if it is not valid
    os.replace(partial, path)


@dataclass(frozen=True)
class Standings:
    """The leaderboard at the end of a moderated run, and what the backbone counted."""

    users: list[dict[str, Any]]
    """The top volunteers as the coordinator ranks them (rank, username, samples, compute_seconds,
    devices)."""
    samples: int
    """The leaderboard's total."""
    epochs: int
    """Epochs the backbone reported."""
    counted: int
    """Samples in those epochs, by the backbone's metrics."""

    @property
    def match(self) -> bool:
        """Every sample the backbone counted is credited to someone, and nothing more."""
        return self.counted == self.samples


async def standings(swarm: ModeratedSwarm, *, limit: int = 10) -> Standings:
    """Ask the swarm's coordinator for its leaderboard, as any volunteer would."""
    async with CoordinatorClient(swarm.service.url) as client:
        board = await client.leaderboard(limit=limit)
    epochs, counted = swarm.service.store.contributions.epoch_totals()
    return Standings(list(board["users"]), int(board["totals"]["samples"]), epochs, counted)


def _manifest(document: dict[str, Any], path: Path) -> AnyManifest:
    return parse_any_manifest(toml_write.dumps(document), path=path)


def name_backbone(manifest_path: Path, work: Path) -> tuple[Path, Path]:
    """The swarm's copy of ``manifest_path`` naming its backbone's key in ``access.backbone_keys``
    (so that the backbone's word confirms the collaboration's state), and that key's file (kept
    across runs, as a project's is)."""
    key_file = work / "backbone" / "backbone-key.pem"
    key_file.parent.mkdir(parents=True, exist_ok=True)
    key = Identity.load_or_create(key_file)
    document = tomllib.loads(manifest_path.read_text(encoding="utf-8"))
    document.setdefault("access", {})["backbone_keys"] = [str(key.peer_id)]
    anchored = work / f"{manifest_path.stem}.anchored.toml"
    write_manifest(anchored, document)
    return anchored, key_file
