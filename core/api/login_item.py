"""Start at login, for the app: the platform's login item (``core.util.process.login_item``), named here
because the app reaches ``core`` only through ``core.api``. ``barnraise uninstall`` removes it."""

from core.util.process.login_item import (
    LoginItem,
    LoginItemError,
    disable,
    enable,
    login_command,
    login_item,
)

__all__ = ["LoginItem", "LoginItemError", "disable", "enable", "login_command", "login_item"]
