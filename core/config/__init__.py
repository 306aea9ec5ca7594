"""Where Barnraise keeps things on this computer, and the ports it listens on.

- ``paths``  ``UserDirs``: per-user config, data, cache, runtime and log directories, following each
  platform's conventions (XDG on Linux, ~/Library on macOS, %LOCALAPPDATA% on Windows), all moved
  under one folder when ``BARNRAISE_HOME`` is set (tests, several peers on one machine).
- ``environment``  the environment variables more than one layer reads or writes (a headless
  login's password).
- ``runtime_packages``  the user's folder for the torch a light bundle fetches on first run, put
  on ``sys.path`` by every process of the bundle, and published there whole.
- ``roles``  a peer's role in a project (trainer, client, backbone) and how records write it.
- ``ports``  the default listening port of each role, and listen addresses for every interface.
"""
