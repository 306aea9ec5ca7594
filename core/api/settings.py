"""The engine's preferences as the API's ``Settings``: their values, and each one's description and
default from ``core.policy.Preferences``. The engine answers with this and so does the fake engine,
so a preference's explanation is written once, beside the preference."""

from __future__ import annotations

from core.api.schema import SettingInfo, Settings
from core.policy import Preferences


def settings_view(preferences: Preferences) -> Settings:
    return Settings(
        values=preferences.to_dict(),
        descriptions=[
            SettingInfo(name, help_text, default)
            for name, help_text, default in Preferences.describe()
        ],
    )
