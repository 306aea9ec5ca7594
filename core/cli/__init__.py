"""The ``barnraise`` command line.

- ``main``      argument parsing, logging set-up and dispatch to the subcommands.
- ``identity``  ``barnraise identity``: print (creating on first use) this user's PeerID.
- ``demo``      ``barnraise demo``: two peers on loopback exchange one authenticated call.
- ``dht/``      ``barnraise dht``: a standalone DHT node and its JSON command interface.
- ``peer/``     ``barnraise peer`` and ``barnraise backbone``: one peer of a project, from its manifest;
  the backbone's composition root (publishing, model export, reporting); a ``dmoe`` project's
  asynchronous mixture-of-experts trainer.
- ``experts``   ``barnraise experts``: an expert server of a ``dmoe`` project
  (``core.moe.server.runtime``), printing its ready line and what it served as JSON.
- ``swarm/``    ``barnraise swarm``: a whole local collaboration on the demo project (the main job),
  ``--moderated`` with a coordinator, ``--project dmoe`` a mixture of experts: its arguments and
  what it prints, the swarm itself being ``core.swarm``.
- ``engine``    ``barnraise engine``: the background engine (``core.control``), logging to a file.
- ``ctl/``      ``barnraise ctl``: drives the running engine through its control API, and prints
  its answers as text.
- ``signals``   stopping long-running commands cleanly on Ctrl-C and SIGTERM.
- ``exit_guard`` once ``barnraise engine`` has stopped, the process exits within seconds even with
  threads stuck in blocking calls (Python would wait for them for ever).
- ``access``    a headless peer's login to a moderated project (password from stdin, the environment
  or a prompt) and the session that keeps its pass fresh.
- ``coordinator/`` ``barnraise coordinator``: an organizer's coordinator, ``users`` to manage it,
  and ``audit``: the credit against the backbone's records.
- ``project``   ``barnraise project new``: a new project's folder (manifest, keys, the organizer's
  account, service files for the backbone), and ``project check``: a manifest and its data
  (``core.organize``).
- ``export``    ``barnraise export``: a collaborative project's trained model as a folder for
  transformers and the Hugging Face Hub (``core.export``).
- ``app``       ``barnraise app`` (and ``barnraise`` alone on a desktop): hands over to the desktop app.
- ``uninstall`` ``barnraise uninstall [--purge]``: removes the login item, says what is left (and
  with ``--purge`` removes the folders and saved logins too, never under a running engine).
- ``torch_fetch`` ``barnraise torch status|install``: fetch the torch build for this computer into
  the user's folder (a light bundle's first run), with pip; ``pip_output`` reads pip's lines as
  progress and tells an unreachable index from other failures.
"""
