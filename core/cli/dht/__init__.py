"""``barnraise dht``: a standalone DHT node, what an organizer's backbone server runs.

- ``command``  its arguments, the login of a moderated project's node, and running it.
- ``stdio``    its JSON-line commands on standard input (scripts and benchmarks; POSIX only).
"""
