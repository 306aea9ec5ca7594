"""Organizing a project: ``barnraise project new`` makes one, ``barnraise project check`` tests one.

- ``presets``      the shipped manifests a project starts from (``demo``, ``albert-large``,
  ``albert-xxlarge``; the mixture-of-experts demo for a ``dmoe`` project).
- ``answers``      what a new project needs to know: flags, questions with their defaults, the checks
  on each answer (``settle``); the ``Asker`` a terminal implements.
- ``manifest_text`` a built manifest as commented TOML: every key with a note on why it matters.
- ``backbone``     the backbone's programs (coordinator, DHT node, backbone or expert server):
  their real ``barnraise`` command lines, ports and file names, for every file that starts them.
- ``services``     those files: systemd units, the password's env file, a Containerfile, compose.yaml
  and a README with the ports and steps.
- ``folder``       a new folder that appears whole or not at all, never over someone's files.
- ``new``          ``create_project``: the keys, the manifest (read back to prove it), the
  coordinator's database with the organizer's account, the services, the demo's data in ``data/``
  (public files only: the coordinator serves it, and the manifest names it there).
- ``findings``     ``Finding``: one checked thing, ok / warning / error, and why.
- ``check``        ``check_project``: the manifest loads, its peers parse, its data is there.
- ``check_data``   every shard URL reachable (ranged GETs, files), the first record readable.
- ``check_tokenizer`` the tokenizer loads as peers load it and fits the model's vocabulary.

The package sits above ``core.swarm``, whose maker of the demo's data it reuses, and the
coordinator, whose store holds the organizer's account. torch loads only where training data is
read or written (the checks, the demo's data, the format of data URLs), never for the rest.
"""
