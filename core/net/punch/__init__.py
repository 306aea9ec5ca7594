"""Hole punching: moving a relayed connection onto a direct one through both NATs.

- ``timing``      PunchTiming, Backoff, RateLimit: when each side of a hole punch fires, its
  rounds, and when a pair or a requester may try again (pure).
- ``candidates``  PunchOffer: the addresses traded before a punch; which we offer and dial.
- ``dial``        the punching sockets: connects from our listening port, repeated for a window.
- ``messages``    the hole-punch protocol's messages (CONNECT, SYNC) and PunchStats.
- ``puncher``     HolePuncher: moves relayed connections onto direct ones by TCP simultaneous
  open (CONNECT/SYNC over the relay, fixed TLS roles, back-off, refusals, stats).
"""
