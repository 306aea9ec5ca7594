"""Rate limits against floods and guessing, counted by address prefix.

- ``addresses``    the address prefix rate limits count by (IPv4 /24, IPv6 /56, 127/8 as one).
- ``ratelimit``    ``LoginLimiter``: failures per account and prefix, per prefix, and a capped
  account-wide slow-down; doubling waits (429), never a lock from everywhere.
- ``signup_limit`` ``SignupLimiter``: sign-ups per prefix and over all, sliding windows (429).
- ``client_address`` ``TrustedProxies``: the address the limits count, the TCP peer's or, from a
  trusted reverse proxy, the right-most ``X-Forwarded-For`` entry that is not a trusted proxy.
"""
