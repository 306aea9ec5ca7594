"""``python -m app``: the desktop app."""

import sys

from app.main import main

sys.exit(main())
