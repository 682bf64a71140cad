"""Where ltv-book keeps what it downloads, converts and computes: the cache root.

A leaf module (it imports nothing from ``ltvlib``) so that the data loader (:mod:`ltvlib.tasks`, whose Arrow
cache lives there) and the cache keys (:mod:`ltvlib.cache`, which read task definitions) can both use it
without importing each other.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_DIR_ENV", "cache_root"]

CACHE_DIR_ENV = "LTV_CACHE_DIR"
"""The environment variable that moves the cache root (default ``~/.cache/ltv-book``)."""


def cache_root() -> Path:
    """The cache root: ``$LTV_CACHE_DIR`` (``~`` expanded), else ``~/.cache/ltv-book``. Read on every call, so
    tests and callers can point it at another folder while a process runs."""
    env = os.environ.get(CACHE_DIR_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ltv-book"
