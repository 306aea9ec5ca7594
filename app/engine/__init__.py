"""How the app reaches the engine. Only this package touches threads or the engine client.

- ``supervisor``  EngineSupervisor (plain asyncio): attach or start, follow events, restart a dead
                  engine, respect one that was stopped on purpose, give up after repeated crashes.
- ``local``       LocalEngines: this user's engine, found by its endpoint file or started as
                  ``barnraise engine``, detached (``core.api.detached``).
- ``bridge``      EngineBridge: the one place the Qt thread and the asyncio thread meet.
- ``store``       EngineStore: snapshots of the engine (state, settings, statistics, account,
                  history, leaderboard, events) with a Qt signal each; commands return PendingCalls.
- ``demo``        DemoSwarm: the local demo collaboration (``barnraise swarm``, detached) the app
                  can start and stops on quit.
- ``preview``     FakeConnector: a FakeEngine in place of a real one (tests, screenshots, --preview).
"""
