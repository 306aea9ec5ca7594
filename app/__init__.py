"""The Barnraise desktop app (PySide6). It talks to the engine only through ``core.api``.

- ``main``          entry point: arguments, the App that owns everything, start and orderly quit.
- ``__main__``      ``python -m app`` (what ``barnraise app`` runs).
- ``preflight``     before Qt starts: can it use this display? If not, which libraries are missing.
- ``window``        MainWindow: navigation, pages, the banner, what closing the window means.
- ``tray``          Tray: the state icon by the clock, with pause, resume, snooze, open and quit.
- ``instance``      SingleInstance: a second launch brings the open window forward.
- ``settings``      AppSettings: geometry, last page, the close choice (QSettings, INI).
- ``presets``       Light, Balanced and Maximum: scheduler preferences in one click.
- ``wording``       numbers, sizes, times and events in plain words (pure functions).
- ``errors``        the one error presenter: an API error as one sentence for the user.
- ``diagnostics``   the "copy diagnostics" report.
- ``about``         the About box: version, folders, the device it trains on (``training_device``).
- ``logs``          AppLog: ``app.log`` and the crash hooks; "Open logs folder".
- ``start_at_login``  StartAtLogin: the login item as a setting, read back (asked once in first run).
- ``theme``, ``icons``  the palette, the state colours; the app's icon from ``resources/icons/``,
                    the tray's with a state badge drawn in code.
- ``torch_fetch``   a light bundle's first run: fetching torch with a progress bar, offline said.
- ``engine/``       the engine side: supervisor, bridge (threads meet the loop here), store, local
                    engines, the demo swarm, the fake connector.
- ``pages/``        first run, dashboard, schedule, statistics, leaderboard, events, projects.
- ``widgets/``      switch, tiles and cards, charts, banner, login form.
"""
