"""Verified reducers: what a member does to check the reducers of its round, and what it relies on.

Its settings, and which parts a member checks, are ``core.averaging.verification``.

- ``verified_round``  RoundVerification: one member's side of a verified round (commit, seal, check,
                      serve).
- ``commitments``     senders' signed chunk hashes, reducers' signed seals of their parts (and their shape).
- ``verifier``        checking one reducer's part: fetch committed inputs, recompute, compare.
- ``retained``        rounds whose inputs verifiers may still fetch, for a while after they end.
"""
