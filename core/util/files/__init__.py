"""Files we write or read on the user's behalf, safely: whole or not at all, regular files only, our
own SQLite files, small TOML files.

- ``atomic``  writing a file whole or not at all (aside, synced, renamed, the rename synced).
- ``regular_file``  reading a small file a user named: regular files only (FIFOs, devices and folders
  refused without blocking), at most a given size (``FileRefused``).
- ``staged_folder``  a folder written aside and renamed into place whole, never over a user's
  files unless asked (``FolderRules``: each caller's error and advice).
- ``sqlite_file``  opening our own SQLite files safely (refuse foreign ones, WAL, migrations).
- ``toml_write``  writing the small TOML files Barnraise keeps (tomllib only reads).
"""
