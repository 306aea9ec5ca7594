"""The coordinator's SQLite tables and how its file is opened (``core.util.files.sqlite_file``, shared
with the contribution ledger, refuses files that are not ours and runs each migration in one
transaction). ``PRAGMA application_id`` marks the file as a coordinator's.

WAL journal with ``synchronous=NORMAL``: readers (the management commands, a backup) never block the
service, and a commit survives the process being killed.

Usernames appear only as bound parameters, never in SQL text. ``user_key`` columns hold the
case-folded name (``names.Username.key``).

Schema 2 (hardening) adds:

- ``users.skeleton``: the look-alike skeleton of each name (``confusables``), so that a new name
  that looks like a taken one is refused. SQL cannot compute it: the store fills the rows that lack
  one when it opens the file (``Accounts.fill_skeletons``). Names stored before keep working, each
  under its stored key; if two legacy names share a skeleton both stay (nothing is renamed or
  merged), and only new names are refused for looking like either.
- ``peer_keys``: which account proved it holds each peer key (a signature over a challenge, see
  ``challenges``); one key, one account. Revocations and device counts read passes only through
  this table, and a contribution counts only for the account that proved its peer's key. Pass rows
  from before (``passes``, kept as they were) name keys nobody proved: they can no longer get
  anyone else's key revoked or credited. Such a key is free for whoever proves it first, and a
  legacy pass it holds still admits it until it expires (at most ``pass_lifetime``).

Schema 3 (accountability) adds ``evidence``: members' signed accusations, as the
backbone passed them on (``evidence``, ``evidence_records``). One row per accusation
(reporter, accused, group, part, chunk, statistic), so a report sent twice counts once; the
signature is kept so that anyone can check a row again. ``reporter_user`` is the account that had
proved the reporter's key when the row arrived; the accused's account is looked up when read
(``peer_keys``), so a key proved later is still named.

Schema 4 (rollback) adds ``rollbacks``: the moderators' signed rollback orders, numbered
from 1, never removed (``rollback``).

Schema 5 (the project page) adds ``figures``: the loss, speed and live peers the
backbone reports with each epoch (``figures``), one row per epoch; ``received`` is when the report
arrived, by the coordinator's clock.

Schema 6 (join by URL) adds ``manifests``: every distinct text of the project's manifest
file the coordinator served, numbered from 1 (``manifest_route``), with the signed envelope as
served; the numbers only grow, across restarts, so volunteers' engines never see one go back.

Schema 7 (held-out evaluations) adds ``evaluations``: the backbone's measurements of its replica
on held-out text (``evaluations``), one row per epoch, whether or not that epoch was reported.

Schema 8 (receipts for expert work) adds ``receipts``: the newest receipt a trainer signed for an
expert server's work, one row per (server, trainer, session), with the signed bytes kept so that
anyone can check it again (``receipts``). ``credited`` is what the row has added to the server
owner's totals so far (the largest total credited; a newer receipt adds its excess over it), and
``receipts`` how many receipts raised it. ``user_key`` is the server key's owner, credited;
``trainer_user`` the owner of the trainer's key when the row arrived. ``totals`` and ``days`` gain
``expert_samples``: the part of their ``samples`` that receipts credited (0 for rows before);
``contributions`` gains an index by peer, for a volunteer's check of its own credit.

Schema 9 (the unigram floor) adds ``evaluations.floor``: what a model that only counts tokens scores
on the same held-out text, as the backbone reported it; null for rows before, and for a backbone
that reports none.

Schema 10 (checked credit) adds ``contributions.claimed`` and ``contributions.note``: where the
backbone's work checks credited a peer less than its records claimed, what they claimed and why (a
volunteer's check of its own credit shows it); null for a share credited as claimed and for rows
before. A withdrawn share keeps its claim and says it was withdrawn.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from core.coordinator.errors import StoreError
from core.util.files.sqlite_file import SqliteFile, transaction

SCHEMA_VERSION = 10
APPLICATION_ID = 0x42524E43  # "BRNC": a Barnraise coordinator
# A management command writing while the service commits waits this long for the lock.
_BUSY_TIMEOUT_S = 5.0

_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """
        CREATE TABLE users (
            key TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            password TEXT,
            role TEXT NOT NULL DEFAULT 'volunteer' CHECK (role IN ('volunteer', 'moderator')),
            allowlisted INTEGER NOT NULL DEFAULT 0,
            banned INTEGER NOT NULL DEFAULT 0,
            ban_reason TEXT NOT NULL DEFAULT '',
            banned_at REAL,
            created REAL NOT NULL
        ) WITHOUT ROWID
        """,
        # Only hashes of tokens: a copy of the database does not let anyone in.
        """
        CREATE TABLE sessions (
            session_hash BLOB PRIMARY KEY,
            refresh_hash BLOB NOT NULL UNIQUE,
            user_key TEXT NOT NULL REFERENCES users (key),
            session_expires REAL NOT NULL,
            refresh_expires REAL NOT NULL,
            created REAL NOT NULL
        )
        """,
        "CREATE INDEX sessions_by_expiry ON sessions (refresh_expires)",
        # One row per (user, peer key): when it first got a pass and when its latest one expires.
        """
        CREATE TABLE passes (
            user_key TEXT NOT NULL REFERENCES users (key),
            peer TEXT NOT NULL,
            first_issued REAL NOT NULL,
            expires REAL NOT NULL,
            PRIMARY KEY (user_key, peer)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX passes_by_expiry ON passes (expires)",
        """
        CREATE TABLE epochs (
            epoch INTEGER PRIMARY KEY,
            samples INTEGER NOT NULL,
            time REAL NOT NULL
        )
        """,
        """
        CREATE TABLE contributions (
            epoch INTEGER NOT NULL,
            peer TEXT NOT NULL,
            user_key TEXT NOT NULL REFERENCES users (key),
            samples INTEGER NOT NULL,
            compute_seconds REAL NOT NULL,
            time REAL NOT NULL,
            PRIMARY KEY (epoch, peer)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX contributions_by_time ON contributions (time, user_key, peer)",
        # Per-user totals and UTC days, kept with each contribution so that the leaderboard never
        # scans every contribution ever made.
        """
        CREATE TABLE totals (
            user_key TEXT PRIMARY KEY REFERENCES users (key),
            samples INTEGER NOT NULL,
            compute_seconds REAL NOT NULL,
            last_seen REAL NOT NULL
        ) WITHOUT ROWID
        """,
        "CREATE INDEX totals_by_rank ON totals (samples DESC, user_key)",
        """
        CREATE TABLE days (
            user_key TEXT NOT NULL REFERENCES users (key),
            day INTEGER NOT NULL,
            samples INTEGER NOT NULL,
            compute_seconds REAL NOT NULL,
            PRIMARY KEY (user_key, day)
        ) WITHOUT ROWID
        """,
    ),
    (
        "ALTER TABLE users ADD COLUMN skeleton TEXT",
        "CREATE INDEX users_by_skeleton ON users (skeleton)",
        """
        CREATE TABLE peer_keys (
            peer TEXT PRIMARY KEY,
            user_key TEXT NOT NULL REFERENCES users (key),
            proved REAL NOT NULL
        ) WITHOUT ROWID
        """,
        "CREATE INDEX peer_keys_by_user ON peer_keys (user_key)",
    ),
    (
        """
        CREATE TABLE evidence (
            reporter TEXT NOT NULL,
            accused TEXT NOT NULL,
            group_id TEXT NOT NULL,
            part INTEGER NOT NULL,
            chunk INTEGER NOT NULL,
            statistic TEXT NOT NULL,
            reporter_user TEXT NOT NULL REFERENCES users (key),
            round TEXT NOT NULL,
            epoch INTEGER NOT NULL,
            value REAL,
            reason TEXT NOT NULL,
            time REAL NOT NULL,
            received REAL NOT NULL,
            signature BLOB NOT NULL,
            PRIMARY KEY (reporter, accused, group_id, part, chunk, statistic)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX evidence_by_accused ON evidence (accused, time)",
        "CREATE INDEX evidence_by_reporter ON evidence (reporter_user, received)",
    ),
    (
        """
        CREATE TABLE rollbacks (
            sequence INTEGER PRIMARY KEY CHECK (sequence >= 1),
            to_epoch INTEGER NOT NULL CHECK (to_epoch >= 0),
            reason TEXT NOT NULL,
            issued REAL NOT NULL,
            signed TEXT NOT NULL
        )
        """,
    ),
    (
        """
        CREATE TABLE figures (
            epoch INTEGER PRIMARY KEY CHECK (epoch >= 0),
            time REAL NOT NULL,
            loss REAL,
            samples_per_second REAL,
            alive_peers INTEGER,
            received REAL NOT NULL
        )
        """,
        "CREATE INDEX figures_by_received ON figures (received)",
    ),
    (
        """
        CREATE TABLE manifests (
            version INTEGER PRIMARY KEY CHECK (version >= 1),
            sha256 TEXT NOT NULL,
            text TEXT NOT NULL,
            issued INTEGER NOT NULL,
            envelope BLOB NOT NULL
        )
        """,
    ),
    (
        """
        CREATE TABLE evaluations (
            epoch INTEGER PRIMARY KEY CHECK (epoch >= 0),
            time REAL NOT NULL,
            loss REAL NOT NULL,
            accuracy REAL NOT NULL CHECK (accuracy BETWEEN 0 AND 1),
            samples INTEGER NOT NULL CHECK (samples >= 0),
            tokens INTEGER NOT NULL CHECK (tokens >= 0),
            seconds REAL NOT NULL,
            received REAL NOT NULL
        )
        """,
    ),
    (
        "ALTER TABLE totals ADD COLUMN expert_samples INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE days ADD COLUMN expert_samples INTEGER NOT NULL DEFAULT 0",
        # a volunteer's engine asks for its own peer's credit (``peer_credit``)
        "CREATE INDEX contributions_by_peer ON contributions (peer, epoch)",
        """
        CREATE TABLE receipts (
            server TEXT NOT NULL,
            trainer TEXT NOT NULL,
            session BLOB NOT NULL,
            sequence INTEGER NOT NULL CHECK (sequence >= 0),
            forward_samples INTEGER NOT NULL CHECK (forward_samples >= 0),
            backward_samples INTEGER NOT NULL CHECK (backward_samples >= 0),
            credited INTEGER NOT NULL CHECK (credited >= 0),
            receipts INTEGER NOT NULL CHECK (receipts >= 1),
            user_key TEXT NOT NULL REFERENCES users (key),
            trainer_user TEXT NOT NULL REFERENCES users (key),
            first_received REAL NOT NULL,
            received REAL NOT NULL,
            signed BLOB NOT NULL,
            PRIMARY KEY (server, trainer, session)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX receipts_by_user ON receipts (user_key, first_received)",
    ),
    ("ALTER TABLE evaluations ADD COLUMN floor REAL",),
    (
        "ALTER TABLE contributions ADD COLUMN claimed INTEGER",
        "ALTER TABLE contributions ADD COLUMN note TEXT",
    ),
)
assert len(_MIGRATIONS) == SCHEMA_VERSION

_FILE = SqliteFile(
    "coordinator database",
    APPLICATION_ID,
    _MIGRATIONS,
    StoreError,
    busy_timeout=_BUSY_TIMEOUT_S,
    foreign_keys=True,
)

__all__ = ["SCHEMA_VERSION", "open_database", "transaction"]


def open_database(path: Path) -> sqlite3.Connection:
    """Open (creating if absent) the coordinator database at ``path``, at the current schema."""
    return _FILE.open(path)
