"""One authenticated connection: frames, calls and streams over it.

Everything here works on a connection that is already open and authenticated; how connections are
made and accepted is ``core.net.host``.

- ``frames``      the frame format and an incremental, I/O-free decoder.
- ``hello``       the first message of each connection (version, window, listen addresses, pass).
- ``link``        Link and StreamLink: the protocols through which calls and streams use their
  connection (so that none of them imports ``connection``: the package has no import cycle).
- ``stream``      Stream: messages and raw data both ways inside a call, credit flow control.
- ``rpc``         Method/StreamMethod, CallContext and the Router of handlers.
- ``calls_in``    IncomingCalls: the calls the peer opens, checked, run as named tasks, answered once.
- ``calls_out``   OutgoingCalls and CallStream: the calls we open, their ids, deadlines and outcomes.
- ``lifecycle``   Phase and Event: a connection's life as one state, and its only legal transitions.
- ``connection``  Connection: the asyncio protocol multiplexing calls over one TLS link.
- ``pings``       Pings: round-trip probes on one connection (a random token, echoed).
- ``bandwidth``   upload and download limits: token buckets shared by a Host's connections.
- ``traffic``     Traffic: bytes sent and received by a Host's connections (for the ledger).
"""
