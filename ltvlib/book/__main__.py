"""``python -m ltvlib.book``: the command line of :mod:`ltvlib.book.runner` (``list``, ``tidy``, ``build``)."""

import sys

from ltvlib.book.runner import main

sys.exit(main())
