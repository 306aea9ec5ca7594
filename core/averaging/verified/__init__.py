"""Verified reducers: the verified round wrapped around a round's transfer, and what it relies on.

Its settings, and which parts a member checks, are ``core.averaging.round.checks``.

- ``verified_round``  RoundVerification: the transfer's hooks (commit, seal, keep seals), then the
                      checks after the round, and serving our inputs to verifiers.
- ``repairs``         putting back what a reducer we caught lying sent us.
- ``commitments``     senders' signed chunk hashes, reducers' signed seals of their parts (and their shape).
- ``verifier``        checking one reducer's part: fetch committed inputs, recompute, compare.
- ``retained``        rounds whose inputs verifiers may still fetch, for a while after they end.
"""
