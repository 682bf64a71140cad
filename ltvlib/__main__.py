"""``python -m ltvlib``: the command line of :mod:`ltvlib.cli` (``train``, ``eval``; ``--help`` for examples)."""

import sys

from ltvlib.cli import main

sys.exit(main())
