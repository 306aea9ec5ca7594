"""A peer's role in a project: what it does for the collaboration, one word each.

- ``trainer``   computes: a volunteer's peer (``barnraise peer``, the desktop engine).
- ``client``    a trainer that others cannot dial (behind a router that lets nothing in): it
  averages as a client, reducing nothing and leading no group.
- ``backbone``  the organizer's peer that computes nothing: it keeps, serves and checkpoints the
  model, reduces a share of every round, turns the records into metrics and credit, and passes
  the members' evidence on (``barnraise backbone``).

The role is not the training mode (``core.modes``: how a project's peers train together), which
every peer of a project shares.

Progress records name the backbone's role ``"aux"`` on the wire (``WIRE_NAMES``), as the first
releases did: a reader of those releases drops a record whose role it does not know, and with the
backbone's record it would lose the epoch and the held-out figures that record carries. Only the
records' wire form reads or writes that name.
"""

from __future__ import annotations

from types import MappingProxyType

TRAINER = "trainer"
CLIENT = "client"
BACKBONE = "backbone"
ROLES = (TRAINER, CLIENT, BACKBONE)
COMPUTING = (TRAINER, CLIENT)
"""The roles that compute (and claim samples)."""
WIRE_NAMES = MappingProxyType({TRAINER: TRAINER, CLIENT: CLIENT, BACKBONE: "aux"})
"""How a progress record writes each role."""
