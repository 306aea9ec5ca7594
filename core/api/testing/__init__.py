"""An engine in memory for the app's tests, the screenshot script and ``barnraise app --preview``,
kept apart from the contract (as ``trio.testing`` is from ``trio``): nothing in ``core.api`` needs
it, and the engine never imports it.

- ``fake``         FakeEngine: answers ``EngineApi`` from memory, deciding with the real policy
  (``core.policy``); test hooks for conditions, peer failures, failing calls and events, project
  URLs it answers previews for (``serve_project``) and signed updates (``update_manifest``).
- ``coordinator``  FakeCoordinator: the demo project's accounts and leaderboard; can be down.
- ``stream``       EventStream: the fake's numbered events, kept and fanned out across threads.
- ``backlog``      the events a real engine keeps after a morning of work, worded by the policy.
- ``model``        the fake's model for "try the model": made-up guesses and completions, the same
  for the same text on every run.
- ``sample_data``  a calm computer, the demo offer, a month of contribution, a leaderboard, a loss
  curve, diagnostics: seeded, the same on every run; projects' info as an engine gives it.
"""

from core.api.testing.fake import FakeEngine, Scenario
from core.api.testing.sample_data import CALM, DEMO

__all__ = ["CALM", "DEMO", "FakeEngine", "Scenario"]
