"""The Barnraise desktop app (PySide6). It talks to the engine only through ``core.api``.

Empty for now: the pages, tray and engine client arrive with the desktop-app work.
"""
