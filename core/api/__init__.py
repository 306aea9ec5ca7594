"""The contract between the engine and the desktop app (filled in by the engine-daemon work).

It will hold the versioned schema, typed events, the error hierarchy shown to users and the async
client of the control API. The app imports nothing from ``core`` but this package, and this package
imports neither Qt nor torch.
"""
