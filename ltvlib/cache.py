"""On-disk cache for models, task vectors and results.

Layout (root from ``$LTV_CACHE_DIR``, default ``~/.cache/ltv-book``)::

    models/                 converted model weights (written by ltvlib.models)
    vectors/<kind>/<key>.*  tensors, written by callers via :func:`cache_path`
    results/<kind>/<key>.json  JSON results, via :func:`cached_json`

Keys are sha256 digests of a canonical JSON of the config plus
:func:`code_version`, so editing any ``ltvlib`` source invalidates old entries
instead of silently reusing numbers computed by older code. Only JSON and
safetensors are stored: no pickles, so a cache dir is safe to share.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import Any

__all__ = [
    "AREAS",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "cache_path",
    "cache_root",
    "cached_json",
    "canonical",
    "code_version",
    "config_key",
]

AREAS = ("models", "vectors", "results")
_PKG_DIR = Path(__file__).resolve().parent


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# mkstemp creates files 0600; written files get the mode a plain open() would give
_FILE_MODE = 0o666 & ~_current_umask()
# kinds become directory names: keep them to safe, relative path segments
_KIND_RE = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")


def cache_root() -> Path:
    """Cache root; read on every call so tests can point it at a tmp dir."""
    env = os.environ.get("LTV_CACHE_DIR")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "ltv-book"
    return root


def _package_version() -> str:
    try:
        from ltvlib import __version__  # type: ignore[attr-defined]

        return str(__version__)
    except ImportError:
        pass
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("ltv-book")
    except PackageNotFoundError:
        return "0"


# The modules whose code decides the numbers every result builds on. Results are keyed by their source, so
# changing how prompts are built or vectors injected invalidates old results, while adding a chapter or an
# analysis module does not invalidate the vectors other chapters cached (those modules put their own
# source_hash into their result keys).
CORE_MODULES = (
    "models.py", "sites.py", "tasks.py", "prompts.py", "inject.py", "prefix.py", "runner.py", "evaluate.py",
    "ltv.py",
)


@functools.cache
def source_hash(*relative_paths: str) -> str:
    """sha256[:12] over the named ``ltvlib`` source files (all ``*.py`` files when none are named)."""
    paths = [_PKG_DIR / p for p in relative_paths] or sorted(
        p for p in _PKG_DIR.rglob("*.py") if "__pycache__" not in p.parts
    )
    h = hashlib.sha256()
    for path in paths:
        # hash the relative name too, so moving code between files counts as a change
        h.update(path.relative_to(_PKG_DIR).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:12]


@functools.cache
def code_version() -> str:
    """``<__version__>+<source_hash of CORE_MODULES>``: the code version in every cache key."""
    return f"{_package_version()}+{source_hash(*CORE_MODULES)}"


def canonical(obj: Any) -> Any:
    """Convert ``obj`` to plain JSON types, deterministically.

    Dataclasses keep their class name so two configs with equal fields but
    different meaning don't collide. Tuples become lists. Anything else raises
    TypeError naming the type: silently ``str()``-ing an object would give keys
    that depend on its repr (memory addresses, etc.).
    """
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        if not math.isfinite(obj):
            # JSON has no NaN/inf; repr keeps them distinct and stable
            return {"__float__": repr(obj)}
        return obj
    if isinstance(obj, PurePath):
        return {"__path__": obj.as_posix()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        cls = type(obj)
        out = {f.name: canonical(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        out["__dataclass__"] = f"{cls.__module__}.{cls.__qualname__}"
        return out
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"config_key: dict keys must be str, got {type(k).__name__} ({k!r})")
            out[k] = canonical(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [canonical(v) for v in obj]
    raise TypeError(f"config_key: cannot canonicalise object of type {type(obj).__module__}.{type(obj).__qualname__}")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def config_key(config: Any) -> str:
    """Stable sha256 hex digest of ``config`` and the current code version.

    Args:
        config: dataclasses, dicts (str keys), lists, tuples, str, int, float,
            bool, None and Path, nested freely.

    Returns:
        64 hex characters.

    Raises:
        TypeError: for any other type, naming it.
    """
    payload = {"config": canonical(config), "code_version": code_version()}
    return hashlib.sha256(_dumps(payload).encode("utf-8")).hexdigest()


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never half.

    The temp file lives in the destination dir because os.replace is only
    atomic within one filesystem.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            try:
                mode = path.stat().st_mode & 0o7777  # keep the mode of the file we replace
            except FileNotFoundError:
                mode = _FILE_MODE
            os.fchmod(fh.fileno(), mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    return path


def _fsync_dir(directory: Path) -> None:
    # makes the rename itself durable; not supported everywhere (e.g. Windows)
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    return atomic_write_bytes(path, text.encode(encoding))


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 1) -> Path:
    # serialise first: a TypeError must not touch the destination. NaN is
    # allowed (Python's json reads it back) because metrics can be NaN.
    text = json.dumps(obj, indent=indent, sort_keys=True, ensure_ascii=False)
    return atomic_write_text(path, text + "\n")


def _check_kind(kind: str) -> str:
    if not _KIND_RE.match(kind) or any(p in (".", "..") for p in kind.split("/")):
        raise ValueError(f"invalid cache kind {kind!r}: use letters, digits, '_', '-', '.', '/'")
    return kind


def cache_path(kind: str, config: Any, suffix: str, *, area: str = "vectors") -> Path:
    """Path for a cache entry that the caller writes itself (e.g. safetensors).

    Args:
        kind: entry family, relative path segments such as ``"ltv"`` or ``"ltv/sst2"``.
        config: what the entry depends on; hashed by :func:`config_key`.
        suffix: file extension, with or without the dot.
        area: ``"vectors"`` (default), ``"results"`` or ``"models"``.

    Returns:
        ``<root>/<area>/<kind>/<key><suffix>``; its parent dir exists. Write it
        with :func:`atomic_write_bytes` so readers never see half a file.
    """
    if area not in AREAS:
        raise ValueError(f"area must be one of {AREAS}, got {area!r}")
    if suffix and not suffix.startswith("."):
        suffix = "." + suffix
    directory = cache_root() / area / _check_kind(kind)
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"{config_key(config)}{suffix}"


def cached_json(kind: str, config: Any, compute: Callable[[], dict]) -> dict:
    """Return ``compute()``, memoised in ``results/<kind>/<key>.json``.

    Args:
        kind: result family, e.g. ``"icl_baseline"``; becomes a directory.
        config: what the result depends on; hashed by :func:`config_key`.
        compute: called only on a miss; must return a JSON-serialisable dict.

    Returns:
        The stored value (tuples come back as lists, identical on hit and miss).

    The config and code version are stored beside the value so a cache file
    can be understood without the code that wrote it. A corrupt file (e.g.
    from an older, non-atomic writer) is recomputed rather than trusted.
    """
    path = cache_path(kind, config, ".json", area="results")
    if path.exists():
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            return record["value"]
        except (json.JSONDecodeError, KeyError, TypeError):
            pass
    value = compute()
    if not isinstance(value, dict):
        raise TypeError(f"cached_json: compute() must return dict, got {type(value).__name__}")
    record = {"kind": kind, "config": canonical(config), "code_version": code_version(), "value": value}
    atomic_write_json(path, record)
    # return what a later call will read, so first and cached runs agree exactly
    return json.loads(json.dumps(value))
