"""On-disk cache for models, task vectors and results.

Layout (root from ``$LTV_CACHE_DIR``, default ``~/.cache/ltv-book``)::

    models/<name>/             dequantised embedded models (written by ltvlib.models)
    gguf/                      Gemma-3-270M's GGUF file, reassembled from its packages
    datasets/                  Hugging Face ``datasets`` Arrow cache of the data files (ltvlib.tasks)
    vectors/<kind>/<key>.*     tensors, written by callers via :func:`cache_path`
    results/<kind>/<key>.json  JSON results, via :func:`cached_json`

A key is the sha256 digest of a canonical JSON of what the entry depends on:

- its config, including :func:`task_key` for every task whose data it reads (the task's definition and
  the bytes of its data files), so editing a data file or reusing a task name for other data misses;
- :func:`code_version`, the source of the trainer, evaluator and model loader and every ``ltvlib`` module
  they import (:func:`import_closure`);
- for results of other modules, :func:`dependency_hash` of the module that computes them.

Editing an analysis or chapter-level module therefore leaves trained vectors valid, while editing the
trainer or anything it imports invalidates them. Only JSON and safetensors are stored: no pickles, so a
cache dir is safe to share.
"""

from __future__ import annotations

import ast
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

from .tasks import Task, data_root, get_task

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
    "dependency_hash",
    "import_closure",
    "script_dependency_hash",
    "source_hash",
    "task_fingerprint",
    "task_key",
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
        from ltvlib import __version__

        return str(__version__)
    except ImportError:
        pass
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("ltv-book")
    except PackageNotFoundError:
        return "0"


# The modules whose code decides the numbers every result builds on: the trainer, the evaluator and the model
# loader (the model is loaded by name, so the loader is a dependency though nothing imports it). Their
# imports are followed (import_closure), so a module the trainer starts to use joins the key by itself.
CORE_MODULES = ("ltvlib.ltv", "ltvlib.evaluate", "ltvlib.models")

# The key machinery itself: a change to how keys are built changes the keys by itself, and its source is
# not a computation any result depends on, so it (and what only it imports) is left out of every closure.
_KEY_MODULE = "cache.py"


def _hash_files(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in paths:
        # hash the relative name too, so moving code between files counts as a change
        h.update(path.relative_to(_PKG_DIR).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:12]


@functools.cache
def source_hash(*relative_paths: str) -> str:
    """sha256[:12] over the named ``ltvlib`` source files (all ``*.py`` files when none are named)."""
    paths = [_PKG_DIR / p for p in relative_paths] or sorted(
        p for p in _PKG_DIR.rglob("*.py") if "__pycache__" not in p.parts
    )
    return _hash_files(paths)


def _module_file(parts: list[str]) -> Path | None:
    """The source file of ``ltvlib.<parts>`` (a module or a package's ``__init__``), or None."""
    base = _PKG_DIR.joinpath(*parts)
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if parts and base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


def _imported(path: Path) -> set[Path]:
    """The ``ltvlib`` files that ``path`` imports anywhere (module level or inside functions), with the
    package ``__init__`` files that importing them runs. ``path`` may lie outside the package (a chapter):
    then only its ``ltvlib.*`` imports count."""
    package = list(path.relative_to(_PKG_DIR).parent.parts) if path.is_relative_to(_PKG_DIR) else None
    wanted: list[list[str]] = []
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                if package is None or node.level - 1 > len(package):
                    continue  # above the package: not ltvlib code
                mod = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "ltvlib":
                mod = node.module.split(".")[1:]
            else:
                continue
            wanted.append(mod)
            # `from . import x` / `from .pkg import sub` may name submodules
            wanted.extend(mod + [alias.name] for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Import):
            wanted.extend(a.name.split(".")[1:] for a in node.names if a.name.split(".")[0] == "ltvlib")
    found: set[Path] = set()
    for parts in wanted:
        # importing ltvlib.a.b runs ltvlib/__init__.py and ltvlib/a/__init__.py too
        for i in range(len(parts) + 1):
            f = _module_file(parts[:i])
            if f is not None:
                found.add(f)
    return found


def _module_path(module: str) -> Path:
    parts = module.split(".")
    if parts[0] == "ltvlib":
        parts = parts[1:]
    f = _module_file(parts)
    if f is None:
        raise ValueError(f"import_closure: {module!r} is not a module of the ltvlib package in {_PKG_DIR}")
    return f


def import_closure(*modules: str, scripts: tuple[Path, ...] = ()) -> tuple[str, ...]:
    """The ``ltvlib`` source files that ``modules`` run when imported: themselves and everything they import
    from ``ltvlib``, directly or not (imports inside functions included), except the key machinery
    (``cache.py``).

    Args:
        modules: dotted module names, e.g. ``"ltvlib.ltv"`` (or ``__name__`` of the caller).
        scripts: files outside the package (e.g. chapters) whose ``ltvlib`` imports are followed; the files
            themselves are not part of the result.

    Returns:
        Sorted paths relative to the package folder, e.g. ``("__init__.py", "evaluate.py", ...)``.

    Raises:
        ValueError: a name that is not a module of the package.
    """
    todo = [_module_path(m) for m in modules]
    for script in scripts:
        todo.extend(_imported(Path(script).resolve()))
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen or path == _PKG_DIR / _KEY_MODULE:
            continue
        seen.add(path)
        todo.extend(_imported(path) - seen)
    return tuple(sorted(p.relative_to(_PKG_DIR).as_posix() for p in seen))


@functools.cache
def dependency_hash(*modules: str) -> str:
    """sha256[:12] of the source of :func:`import_closure` of ``modules``: the code a result computed by
    them depends on. Put it in the key of every result a non-core module computes
    (``dependency_hash(__name__)``)."""
    return _hash_files([_PKG_DIR / p for p in import_closure(*modules)])


@functools.cache
def code_version() -> str:
    """``<__version__>+<dependency_hash of CORE_MODULES>``: the code version in every cache key."""
    return f"{_package_version()}+{dependency_hash(*CORE_MODULES)}"


def script_dependency_hash(script: str | os.PathLike[str]) -> str:
    """sha256[:12] of the ``ltvlib`` source a script outside the package (a chapter) imports, directly or
    not. Not memoised: the script may gain imports while a process runs."""
    return _hash_files([_PKG_DIR / p for p in import_closure(scripts=(Path(script),))])


def task_fingerprint(task: str | Task, data_dir: str | os.PathLike[str] | None = None) -> str:
    """sha256[:16] of a task's definition and the bytes of every data file it reads.

    Two tasks with the same name but other data, templates or labels get different fingerprints; so does a
    task whose data file was edited. Computed once per process per (definition, file, mtime, size).

    Args:
        task: a registered name or a :class:`~ltvlib.tasks.Task` (its ``files`` relative to the data folder,
            or absolute).
        data_dir: the data folder, resolved as :func:`ltvlib.tasks.load_splits` resolves it.

    Raises:
        UnknownTaskError: an unregistered name.
        FileNotFoundError: a data file is missing; the message names it and the task.
    """
    t = get_task(task)
    root = data_root(data_dir)
    stats = []
    for name in t.files:
        path = (root / name).resolve()
        try:
            st = path.stat()
        except FileNotFoundError:
            raise FileNotFoundError(f"data file {path} for task {t.name!r} not found (data folder: {root})") from None
        stats.append((path, st.st_mtime_ns, st.st_size))
    return _fingerprint(_dumps(canonical(t)), tuple(stats))


@functools.lru_cache(maxsize=256)
def _fingerprint(definition: str, files: tuple[tuple[Path, int, int], ...]) -> str:
    # mtime and size are in the memo key only, so a file rewritten in place is hashed again; the digest
    # covers the content alone, so a moved data folder with equal files keeps its keys.
    h = hashlib.sha256(definition.encode("utf-8"))
    for path, _, _ in files:
        data = path.read_bytes()
        h.update(b"\0%d\0" % len(data))
        h.update(data)
    return h.hexdigest()[:16]


def task_key(task: str | Task, data_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """What identifies a task in a cache key: ``{"name": ..., "data": task_fingerprint(...)}``."""
    t = get_task(task)
    return {"name": t.name, "data": task_fingerprint(t, data_dir)}


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


def atomic_write_json(
    path: str | os.PathLike[str], obj: Any, *, indent: int | None = 1, sort_keys: bool = True
) -> Path:
    # serialise first: a TypeError must not touch the destination. NaN is
    # allowed (Python's json reads it back) because metrics can be NaN.
    text = json.dumps(obj, indent=indent, sort_keys=sort_keys, ensure_ascii=False)
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
        ``<root>/<area>/<kind>/<key><suffix>``. Nothing is created: write it with
        :func:`atomic_write_bytes` (which makes the parent folder) so readers never see half a file and
        a call that fails before writing leaves no empty folder behind.
    """
    if area not in AREAS:
        raise ValueError(f"area must be one of {AREAS}, got {area!r}")
    if suffix and not suffix.startswith("."):
        suffix = "." + suffix
    return cache_root() / area / _check_kind(kind) / f"{config_key(config)}{suffix}"


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
    # keys stay in the order compute() made them: tables and plots built from a result list its rows and
    # columns in that order, and a sorted file would show a warm run in another order than a cold one
    atomic_write_json(path, record, sort_keys=False)
    # return what a later call will read, so first and cached runs agree exactly
    return json.loads(json.dumps(value))
