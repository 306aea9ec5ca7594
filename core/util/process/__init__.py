"""This process and the operating system around it: starting ourselves again, detached children,
logs and crash files, start at login, the display, our data files.

- ``detached``  starting a child process detached (its own session or process group, stdin closed,
  output to a log file) and stopping it: the app's engine and demo swarm, the local swarm's peers.
- ``launch``  the command lines that start Barnraise again (``barnraise ARGS``, the desktop app):
  ``python -P -m …``, immune to the current folder, or the bundle's program when frozen.
- ``crashes``  ``CrashLog``: uncaught exceptions (threads, the asyncio loop) to the log, fatal errors
  (faulthandler) to a crash file beside it.
- ``logfiles``  every log file bounded: rotating handlers, output files rotated when a child starts,
  the sizes (``LOG_MAX_BYTES``, ``OUTPUT_MAX_BYTES``) and why.
- ``login_item``  start at login: the platform's login item (XDG autostart entry, the Windows Run
  key, a macOS LaunchAgent) running this installation's ``barnraise app --hidden``, read back.
- ``desktop``  whether this session has a display for the desktop app (stdlib only).
- ``resources``  ``resource_path``: the data files (``resources/``) in a checkout, a wheel or a bundle.
"""
