"""The book: :mod:`ltvlib.book.runner` executes the chapters and renders the HTML (``python -m ltvlib.book``),
:mod:`ltvlib.book.scorecard` holds the claims, their verdict rules and the verdict table."""
