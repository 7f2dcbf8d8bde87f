"""``python -m attnbook.train_lm``: the command line of :mod:`attnbook.train_lm.cli`."""

import sys

from .cli import main

sys.exit(main())
