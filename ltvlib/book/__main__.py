"""``python -m ltvlib.book``: the command line of :mod:`ltvlib.book.runner` (``list``, ``tidy``, ``build``) and
``plan``, what a run costs before it runs (:mod:`ltvlib.study.plan_command`: it reads the studies' plans, which the book's
own modules never import)."""

import sys

if sys.argv[1:2] == ["plan"]:
    from ltvlib.study.plan_command import main as plan

    sys.exit(plan(sys.argv[2:]))

from ltvlib.book.runner import main

sys.exit(main())
