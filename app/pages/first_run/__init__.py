"""First run: choose a project, log in or sign up, pick a preset — then the dashboard, still paused.

Step 1 lists what the engine offers (a local demo swarm running on this computer, projects
already attached; when it finds none, the local demo swarm to start). Any project can be joined
from its manifest file, or by its URL (BOINC's "Add project"): the engine looks it up — fetches its
signed manifest and checks the signature — and step 1 shows what it is and what it would use before
anything is joined; "Join" attaches it, pinning the project key the user saw. Step 2 appears when
the project has a coordinator (accounts, leaderboard). Step 3 sets the scheduler preferences from a
preset and asks, once, whether Barnraise starts in the tray at login. Nothing starts computing:
contributing is the dashboard's switch, as BOINC starts paused until the user opts in.

The same page adds a project later (the File menu's "Add project…", ``start_adding``): step 1 with a
Cancel, step 2 only when the joined project is the one the engine contributes to, never step 3. The
engine keeps one project active: the preview of a project joined while another is active offers to
contribute to the new one instead (ticked: the engine switches after the attach, and step 2 follows
for a moderated project), or to attach it beside the active one, where it waits; the preview says
which before anything is joined.

- ``wizard``    FirstRunPage: the steps composed under one title, Back and Next, moving between
  the steps as the flow says; the first run's end (the preset saved).
- ``flows``     the first run and Add project: the page's words, which step follows which.
- ``project``   ProjectStep, step 1: the offers, the demo swarm, a manifest file, a project URL
  looked up; ``preview`` is its second face.
- ``preview``   PreviewFace: a looked-up project before joining; in Add project, what joining does
  to the active project and the choice to contribute to the new one instead.
- ``account``   AccountStep, step 2: log in or sign up at the project's coordinator, or skip.
- ``preset``    PresetStep, step 3: Light, Balanced or Maximum, and the start at login.
- ``joining``   Joiner: attach, switch to the project when asked, then refresh the account.
"""

from app.pages.first_run.wizard import FirstRunPage

__all__ = ["FirstRunPage"]
