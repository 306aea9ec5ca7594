"""``barnraise coordinator``: an organizer's coordinator, and the tools to manage it.

- ``command``  running the coordinator; ``users``, ``reports`` and ``rollback`` on its database.
- ``audit``    ``barnraise coordinator audit``: the credit against the backbone's records.
"""
