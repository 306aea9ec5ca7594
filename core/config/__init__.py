"""Where Barnraise keeps things on this computer.

- ``paths``  ``UserDirs``: per-user config, data, cache, runtime and log directories, following each
  platform's conventions (XDG on Linux, ~/Library on macOS, %LOCALAPPDATA% on Windows), all moved
  under one folder when ``BARNRAISE_HOME`` is set (tests, several peers on one machine).
"""
