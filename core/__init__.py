"""Barnraise engine: everything that runs without a GUI.

Packages, bottom to top (each may import only those below it; ``pyproject.toml``'s import-linter
contracts hold them to it):

- ``util``    small dependency-free helpers: errors root, named background tasks, base58, wire messages.
- ``config``  per-user directories following each platform's conventions; default ports.
- ``policy``  the pure rules of contributing: preferences, conditions, ``decide``, state names and
  reason codes, their wording (beside ``config``: imports only ``util``; the fake engine uses it too).
- ``modes``   the training modes (``dedloc``, ``diloco``): one spec per mode in one table, which the
  manifest, the command lines, the engine, the app, the project page and training read; each spec
  names the sub-package of ``training`` that builds its trainer and its backbone.
- ``trust``   who is who and what they signed: peer ids, identity keys, access passes, evidence,
  rollback orders (no networking: the coordinator reads them too).
- ``net``     authenticated TLS connections, framing, RPC and streams (``wire``), the Host
  (``host``), and reaching peers behind home routers (``reach``, ``relay``, ``punch``).
- ``dht``     the Kademlia DHT: expiring, optionally owned records.
- ``codecs``  how float32 values travel: one spec per codec (names, wire id, kernel, bytes per value)
  in one table, which averaging, the manifest, the engine's estimates and the MoE wire read (the
  kernels load numpy and torch on first use).
- ``averaging`` matchmaking, load-balanced butterfly all-reduce, Moshpit groups, state sharing.
- ``data``    streamed shards, shuffle and mixing, tokenizer, masked-LM batches, a local shard server.
- ``project`` the project manifest (TOML) and its validation.
- ``worker``  the torch worker runtime both kinds of training stand on: the training thread's bridge
  to the loop, control, device and precision, and the events a peer tells its owner.
- ``optim``   memory-efficient optimizers: 8-bit or offloaded Adam moments, LAMB, AdamW, schedules.
- ``models``  the models a project trains (the ALBERT masked language model).
- ``moe``      decentralized mixture-of-experts (Learning@home): expert grid, DHT announcements, gating,
  beam search, the expert server.
- ``training`` collaborative training (DeDLOC): the collaborative optimizer, the backbone's
  backbone, checkpoints and rollbacks, the project peer.
- ``stats``   the contribution ledger (SQLite, per project and hour) and its meter.
- ``scheduler`` the sensors the policy decides from (idle, battery, load, memory, GPU), sampled.
- ``account`` the coordinator client, login session, pass keeper, keyring credentials, reporter.
- ``coordinator`` the organizer's service: accounts, allowlist, access passes, leaderboard.
- ``swarm``   the local demo swarm (``barnraise swarm``): its record, reader and follower for the
  engine, demo data, peer processes, the moderated set-up.
- ``organize`` an organizer's tools: ``barnraise project new`` (manifest, keys, accounts, service
  files) and ``project check`` (a manifest and its data).
- ``export``  ``barnraise export``: a collaborative project's trained model as a folder for
  transformers and the Hugging Face Hub (beside ``organize``: neither imports the other).
- ``engine``  the long-running engine: scheduler loop, project runner, metering, events, settings file.
- ``control`` the control API server, the one-engine-per-user lock, the engine daemon.
- ``api``     the contract shared with the desktop app and ``barnraise ctl``: schema, events, client
  (outside the stack: it imports only ``util``, ``config``, ``policy`` and ``modes``, so both
  sides can).
- ``cli``     the ``barnraise`` command line (``__main__``: ``python -m core`` runs it).

``core`` never imports Qt or ``app``; the desktop app imports only ``core.api``.
"""

__version__ = "0.1.0"
