"""Hostile-input tests: each replays an attack against the real process.

Each asserts the clean outcome: a clear refusal, nothing lost, the process still serving.
"""
