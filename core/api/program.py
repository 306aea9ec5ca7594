"""Barnraise as a program, for the app: its version, the commands that start its parts, its data files.

The helpers are ``core.util.process.launch`` and ``core.util.process.resources``, at the bottom
of the layers so that the engine's side uses them too; they are named here because the app reaches
``core`` only through ``core.api``. ``VERSION`` is ``core.__version__``, the one place the
version is written (the wheel's metadata reads it from there too).
"""

from core import __version__ as VERSION
from core.util.process.launch import app_command, barnraise_command, frozen
from core.util.process.resources import resource_path

__all__ = ["VERSION", "app_command", "barnraise_command", "frozen", "resource_path"]
