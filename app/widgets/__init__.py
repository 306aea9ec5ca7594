"""Reusable widgets.

- ``switch``      ToggleSwitch: the on/off switch (a checkable button, keyboard accessible).
- ``tiles``       StatTile and Card: framed surfaces.
- ``charts``      LineChart and BarChart over QtCharts, with empty states and accessible text.
- ``banner``      Banner: a message strip with an optional action.
- ``login_form``  LoginForm: log in or sign up at the project's coordinator.
- ``project_url``  ProjectUrlField: the first run's "Project URL" row, and what is plainly not one.
- ``project_preview``  ProjectPreviewCard: a project looked up by URL, before joining (plain text).
- ``try_model``   TryModelBox: "Try the model", a sentence for the active project's model and its
  guesses (or completion), or why it cannot answer.
- ``credit_check``  CreditCheckBox: "Check my credit", this computer's count of its epochs beside
  what the project's coordinator credited, and the epochs that differ with why.
"""
