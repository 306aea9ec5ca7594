"""``barnraise ctl``: drive the running engine from the command line.

- ``command``  the subcommands' arguments, and each one's call to the engine's control API.
- ``text``     how the engine's answers are printed as text.
"""
