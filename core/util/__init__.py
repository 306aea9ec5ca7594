"""Small helpers with no knowledge of networking or training.

- ``errors``  the root of Barnraise's exception hierarchy.
- ``tasks``   ``BackgroundTasks``: named asyncio tasks with an owner that cancels and awaits them.
- ``base58``  base58btc encoding (Bitcoin alphabet), used for printable PeerIDs.
- ``wire``    ``WireMessage``: small typed dataclasses that travel as msgpack arrays, validated on decode.
- ``msgpack_codec``  msgpack packing and unpacking with Barnraise's conventions.
- ``toml_write``  writing the small TOML files Barnraise keeps (tomllib only reads).
- ``sqlite_file``  opening our own SQLite files safely (refuse foreign ones, WAL, migrations).
- ``atomic``  writing a file whole or not at all (aside, synced, renamed, the rename synced).
- ``retry``   ``Retry``: capped exponential backoff with jitter, logged once per change of reason.
- ``recent``  ``RecentEvents``: events per key in a sliding window (the network's rate limits).
- ``clock``   ``Clock``: wall and monotonic time, injectable (``SYSTEM_CLOCK``, ``FakeClock`` for tests).
- ``desktop``  whether this session has a display for the desktop app (stdlib only).
- ``login_item``  start at login: the platform's login item (XDG autostart entry, the Windows Run
  key, a macOS LaunchAgent) running this installation's ``barnraise app --hidden``, read back.
- ``logfiles``  every log file bounded: rotating handlers, output files rotated when a child starts,
  the sizes (``LOG_MAX_BYTES``, ``OUTPUT_MAX_BYTES``) and why.
- ``crashes``  ``CrashLog``: uncaught exceptions (threads, the asyncio loop) to the log, fatal errors
  (faulthandler) to a crash file beside it.
- ``blocking``  ``BlockingPool``: bounded daemon threads for blocking calls (files, the keyring), the
  one place a service's blocking work leaves its loop; full: ``PoolBusy``; closed: ``PoolClosed``.
- ``regular_file``  reading a small file a user named: regular files only (FIFOs, devices and folders
  refused without blocking), at most a given size (``FileRefused``).
- ``memory``  after churn: collect cyclic garbage and hand the free heap back (glibc malloc_trim);
  ReleaseSchedule says when, at a bounded share of the time.
- ``nesting``  ``deeper_than``: whether parsed data nests deeper than a limit, without recursion.
- ``detached``  starting a child process detached (its own session or process group, stdin closed,
  output to a log file) and stopping it: the app's engine and demo swarm, the local swarm's peers.
- ``launch``  the command lines that start Barnraise again (``barnraise ARGS``, the desktop app):
  ``python -P -m …``, immune to the current folder, or the bundle's program when frozen.
- ``resources``  ``resource_path``: the data files (``resources/``) in a checkout, a wheel or a bundle.
- ``web_client``  HTTP clients that may reach the internet (``client_session``, ``open_url``): the
  operating system's certificate store (truststore) and proxy settings; loopback goes direct.
"""
