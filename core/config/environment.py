"""Environment variables that more than one layer reads or writes."""

from __future__ import annotations

PASSWORD_VARIABLE = "BARNRAISE_PASSWORD"
"""The environment variable a headless login (``barnraise peer|backbone|dht|experts``) may take its
password from; the local swarm hands its peers their passwords this way, never on a command line
others can read. Here rather than beside the coordinator client so that naming it in a command's
options does not load the client (aiohttp)."""
