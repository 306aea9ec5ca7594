"""The ``barnraise`` command line.

- ``main``      argument parsing, logging set-up and dispatch to the subcommands.
- ``identity``  ``barnraise identity``: print (creating on first use) this user's PeerID.
- ``demo``      ``barnraise demo``: two peers on loopback exchange one authenticated call.
"""
