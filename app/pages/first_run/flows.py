"""The wizard's two flows over the same steps: which step follows which, and what the page says.

The first run numbers its three steps and ends with the preset. Add project (File > Add project…)
shows step 1 with a Cancel, asks for the account only when the joined project is the one the
engine contributes to (the engine logs in at that project's coordinator only), and never shows the
preset step (answered at the first run).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.api.schema import ProjectInfo

STEPS = ("Choose a project", "Your account", "How much to give")
PROJECT, ACCOUNT, PRESET = range(len(STEPS))

TITLE = "Welcome to Barnraise"
INTRO = (
    "Barnraise lends your computer's idle time to a deep-learning model that many volunteers "
    "train together. Three steps, and nothing runs until you switch it on."
)
ADD_TITLE = "Add a project"
ADD_INTRO = (
    "Join another project by the address (or the manifest file) its organizers publish. Your "
    "preferences stay as they are."
)


@dataclass(frozen=True)
class Flow:
    title: str
    intro: str
    adding: bool
    """Add project: one more project joined after the first run."""

    def label(self, step: int) -> str:
        if self.adding:  # no step 3 to count towards
            return STEPS[step]
        return f"Step {step + 1} of {len(STEPS)}: {STEPS[step]}"

    def after_joining(self, joined: ProjectInfo | None, has_coordinator: bool) -> int | None:
        """The step after a project was joined (None: the flow is done)."""
        if not self.adding:
            return ACCOUNT if has_coordinator else PRESET
        if joined is not None and joined.active and has_coordinator:
            return ACCOUNT  # the account the engine holds is this project's: log in there now
        return None

    def after_account(self) -> int | None:
        """The step after the account step (None: the flow is done)."""
        return None if self.adding else PRESET


FIRST_RUN = Flow(TITLE, INTRO, adding=False)
ADD_PROJECT = Flow(ADD_TITLE, ADD_INTRO, adding=True)
