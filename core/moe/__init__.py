"""Decentralized mixture-of-experts (Learning@home, Ryabinin and Gusev 2020): volunteers host
experts, trainers find them through the DHT and call them remotely.

Two rooms, as in hivemind: ``client`` is what a trainer runs and ``server`` what a volunteer's
expert server runs. Neither imports the other (a contract says so); what both sides must agree on
stays here, beside them: the grid of uids, the DHT records, the wire and how one call is made.

- ``client/``      a trainer: the gate and beam search that find experts, the calls to many of them
  at once, the remote layer, the asynchronous trainer, its peer and events, its receipts, the
  demo's digits.
- ``server/``      an expert server: expert architectures and backends, what a server refuses,
  batching pools, the server, checkpoints, which uids to host, its events and receipt book, and the
  ``ExpertHost`` the engine and ``barnraise experts`` run.
- ``grid``         expert uids on a d-dimensional grid ("prefix.i.j"): parsing, prefixes, bounds; a
  stable seed per uid.
- ``announce``     what servers store in the DHT (uid -> owned address entries, each grid prefix ->
  its active suffixes), the rules that keep strangers from rewriting them, and the refresh task.
- ``protocol``     the expert call's wire messages and typed errors (busy, unknown expert, bad input).
- ``remote``       the caller's half of one expert call: ``call_expert`` on a connection, and
  RemoteExpert, an expert on another peer called like a local one.
"""
