"""Relays: a public peer carries circuits to peers that no one can dial.

- ``messages``      the relay protocol: reserve / connect / incoming methods, their messages,
  RelayStatus reasons, RelayRefused.
- ``limits``        RelayLimits: what a relay grants (reservations, circuits, bytes, time), with why.
- ``reservations``  Reservations: the peers a relay keeps reachable, per-address and per-peer limits.
- ``splice``        Splice: the relay's half of a circuit, pumping two streams within the limits.
- ``service``       RelayService: a public peer serving reservations and circuits.
- ``circuit``       Circuit: our end of a relayed circuit as a socket transport that TLS runs over.
- ``dialer``        RelayDialer: dialing ``relay:<relay>/<peer>`` from any Host; our circuits.
- ``client``        RelayClient: keeping reservations on relays, accepting their circuits.
"""
