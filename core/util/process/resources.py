"""Where Barnraise's data files are (the demo project, the confusables table, icons), however it runs.

They live in the checkout's top-level ``resources/`` folder. A wheel carries that folder as
``core/resources`` (``setup.py`` maps it there; no top-level package of that generic name is
installed), found through ``importlib.resources``; a PyInstaller bundle carries it as ``resources``
in its data folder (``sys._MEIPASS``). ``resource_path`` is the one place that knows which applies.

Paths, not just ``Traversable``: they go on the command lines of child processes (``--manifest``),
and Barnraise is never imported from a zip file.
"""

from __future__ import annotations

import sys
from importlib.resources import files
from pathlib import Path

FOLDER = "resources"


def resource_root() -> Path:
    """The folder of data files: the bundle's, the installed package's, else the checkout's."""
    bundle = getattr(sys, "_MEIPASS", None)
    if getattr(sys, "frozen", False) and bundle:
        return Path(bundle) / FOLDER
    packaged = files("core") / FOLDER
    if isinstance(packaged, Path) and packaged.is_dir():
        return packaged
    # a checkout: core/util/process/ -> the root
    return Path(__file__).resolve().parents[3] / FOLDER


def resource_path(name: str) -> Path:
    """The data file ``name`` (``"demo/project.toml"``: ``/``-separated, relative to the folder).

    Whether it exists is for the caller to find out, as with any path."""
    return resource_root().joinpath(*name.split("/"))
