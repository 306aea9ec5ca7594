"""Small helpers with no knowledge of networking or training.

- ``errors``  the root of Barnraise's exception hierarchy.
- ``tasks``   ``BackgroundTasks``: named asyncio tasks with an owner that cancels and awaits them.
- ``base58``  base58btc encoding (Bitcoin alphabet), used for printable PeerIDs.
- ``wire``    ``WireMessage``: small typed dataclasses that travel as msgpack arrays, validated on decode.
- ``msgpack_codec``  msgpack packing and unpacking with Barnraise's conventions.
- ``retry``   ``Retry``: capped exponential backoff with jitter, logged once per change of reason.
- ``recent``  ``RecentEvents``: events per key in a sliding window (the network's rate limits).
- ``clock``   ``Clock``: wall and monotonic time, injectable (``SYSTEM_CLOCK``, ``FakeClock`` for tests).
- ``blocking``  ``BlockingPool``: bounded daemon threads for blocking calls (files, the keyring), the
  one place a service's blocking work leaves its loop; full: ``PoolBusy``; closed: ``PoolClosed``.
- ``memory``  after churn: collect the young cyclic garbage on the loop and hand the free heap back
  on a worker thread (glibc malloc_trim); ReleaseSchedule says when, at a bounded share of the time.
- ``amounts``  bytes, counts and lengths of time written for people ("2.06 TB", "5 min").
- ``nesting``  ``deeper_than``: whether parsed data nests deeper than a limit, without recursion.
- ``web_client``  HTTP clients that may reach the internet (``client_session``, ``open_url``): the
  operating system's certificate store (truststore) and proxy settings; loopback goes direct.
- ``files/``   writing and reading files safely: atomic writes, regular files only, SQLite, TOML.
- ``process/`` this process and the OS: detached children, relaunching, logs, crashes, login items.
"""
