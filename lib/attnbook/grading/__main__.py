"""``python -m attnbook.grading``: the instructor's command (see :mod:`attnbook.grading.cli`)."""

import sys

from .cli import main

sys.exit(main())
