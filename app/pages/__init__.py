"""The window's pages; each reads the EngineStore and sends commands through it.

- ``first_run``    choose a project (or look one up by its URL), log in or sign up, pick a
                   preset; lands paused. Its add mode (File > Add project…) joins one more,
                   without the preset step.
- ``dashboard``    the contribute switch, the state and its reason, tiles, the loss curve.
- ``schedule``     every scheduler preference with its explanation; presets; snooze.
- ``statistics``   the ledger as charts (samples, compute hours, data per day) and totals; the
                   model's loss; "Try the model" (its guesses for a sentence's missing word).
- ``leaderboard``  rank, percentile, neighbours, top 10, your 7 days; stale data marked.
- ``events``       the engine's recent events and "copy diagnostics".
- ``projects``     every attached project, the active one marked, each with its own figures;
                   contribute to another, or leave one (asked first).
"""
