"""Who may use the coordinator: accounts, their names and passwords, sessions, and the peer keys
each account proved.

- ``accounts``     users, roles, the allowlist (invitations) and bans; new names vs look-alikes.
- ``names``        username rules (NFKC, case-folded key) and ``Password``, which never prints itself.
- ``confusables``  the UTS #39 skeleton of a name, from the table in ``resources/confusables``.
- ``passwords``    scrypt hashes with their parameters, constant-time checks, re-hashing.
- ``sessions``     session and rotating refresh tokens, stored only as SHA-256.
- ``peer_keys``    which account proved each peer key: one key, one account.
- ``possession``   ``PassChallenges`` (single-use, HMAC) and the payload a peer key signs to
  prove it is the caller's before a pass names it.
"""
