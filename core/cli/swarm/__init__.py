"""``barnraise swarm``: a whole local collaboration on the demo project (the main job).

- ``command``  its arguments (``--moderated`` with a coordinator, ``--project dmoe`` a mixture of
  experts), the swarm itself being ``core.swarm``.
- ``text``     SwarmPrinter and DmoePrinter: what it prints while it runs (epochs, leaderboard).
"""
