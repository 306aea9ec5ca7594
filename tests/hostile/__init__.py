"""Hostile-input tests: each replays an attack from issue 18 against the real process and asserts the clean outcome."""
