"""``python -m core`` runs the ``barnraise`` command."""

import sys

from core.cli.main import main

sys.exit(main())
