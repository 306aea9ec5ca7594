"""Reusable widgets.

- ``switch``      ToggleSwitch: the on/off switch (a checkable button, keyboard accessible).
- ``tiles``       StatTile and Card: framed surfaces.
- ``charts``      LineChart and BarChart over QtCharts, with empty states and accessible text.
- ``banner``      Banner: a message strip with an optional action.
- ``login_form``  LoginForm: log in or sign up at the project's coordinator.
"""
