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
- :func:`code_version`, the code of the trainer, evaluator and model loader and every ``ltvlib`` module
  they import (:func:`import_closure`);
- for results of other modules, :func:`dependency_hash` of the module that computes them.

Code is hashed by meaning, not by bytes: each module's syntax tree without its docstrings
(:func:`module_digest`), so comments, docstrings and formatting change no key, while any change to what the
code does (or a move of code between files) does. Editing an analysis or chapter-level module therefore
leaves trained vectors valid, while editing the trainer or anything it imports invalidates them.

Only JSON and safetensors are stored: no pickles, so a cache dir is safe to share. Entries that travel
between machines are checked when read (:func:`read_cached`, :func:`cached_json`): a truncated or corrupt
entry is reported in one warning line naming the file and what is wrong, then recomputed and rewritten.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import Any, TypeVar

from .paths import cache_root
from .tasks import Task, data_root, get_task

__all__ = [
    "AREAS",
    "DamagedEntryError",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "cache_path",
    "cache_root",
    "cached_file",
    "cached_json",
    "canonical",
    "check_safetensors",
    "code_version",
    "config_key",
    "dependency_hash",
    "import_closure",
    "module_digest",
    "normalised_source",
    "read_cached",
    "report_damaged",
    "script_dependency_hash",
    "source_hash",
    "task_fingerprint",
    "task_key",
]

AREAS = ("models", "vectors", "results")
_PKG_DIR = Path(__file__).resolve().parent
_log = logging.getLogger(__name__)
T = TypeVar("T")


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# mkstemp creates files 0600; written files get the mode a plain open() would give
_FILE_MODE = 0o666 & ~_current_umask()
# kinds become directory names: keep them to safe, relative path segments
_KIND_RE = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")


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


def _is_prose(stmt: ast.stmt) -> bool:
    """A statement that is only a string: a docstring (module, class, function) or an attribute's docstring."""
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def normalised_source(source: str | bytes, filename: str = "<source>") -> str:
    """What a module's code means, without its prose: ``ast.dump`` of its syntax tree (no positions) with every
    statement that is only a string (docstrings) removed. Comments and formatting never reach the tree.

    Raises:
        SyntaxError: ``source`` is not valid Python (the message names ``filename``).
    """
    tree = ast.parse(source, filename=filename)
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            stmts = getattr(node, name, None)
            if isinstance(stmts, list) and any(isinstance(s, ast.stmt) and _is_prose(s) for s in stmts):
                setattr(node, name, [s for s in stmts if not _is_prose(s)])
    return ast.dump(tree, include_attributes=False)


# sha256 of a file's bytes -> sha256 of its normalised source: each version of a file is parsed once per process
_NORMALISED: dict[bytes, bytes] = {}


def module_digest(path: Path) -> bytes:
    """sha256 of :func:`normalised_source` of the file at ``path``, memoised on the file's bytes (reading and
    hashing a file is cheap; parsing it is what the memo saves)."""
    data = path.read_bytes()
    raw = hashlib.sha256(data).digest()
    found = _NORMALISED.get(raw)
    if found is None:
        found = _NORMALISED[raw] = hashlib.sha256(normalised_source(data, str(path)).encode()).digest()
    return found


def _hash_files(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in paths:
        # hash the relative name too, so moving code between files counts as a change
        h.update(path.relative_to(_PKG_DIR).as_posix().encode())
        h.update(b"\0")
        h.update(module_digest(path))
    return h.hexdigest()[:12]


@functools.cache
def source_hash(*relative_paths: str) -> str:
    """sha256[:12] over the code (:func:`module_digest`) of the named ``ltvlib`` source files (all ``*.py``
    files when none are named)."""
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


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in ``tree`` that can run (module level or inside functions), in source order;
    the body of an ``if TYPE_CHECKING:`` block is left out (its ``else`` branch is kept): it never runs."""
    if isinstance(tree, (ast.Import, ast.ImportFrom)):
        return [tree]
    if isinstance(tree, ast.If) and _is_type_checking(tree.test):
        children: list[ast.AST] = list(tree.orelse)
    else:
        children = list(ast.iter_child_nodes(tree))
    return [node for child in children for node in _runtime_imports(child)]


# (package folder, file, sha256 of its bytes) -> the ltvlib files it imports
_IMPORTED: dict[tuple[Path, Path, bytes], frozenset[Path]] = {}


def _imported(path: Path) -> set[Path]:
    """The ``ltvlib`` files that ``path`` imports anywhere (module level or inside functions, not under ``if
    TYPE_CHECKING:``), with the package ``__init__`` files that importing them runs. ``path`` may lie outside
    the package (a chapter): then only its ``ltvlib.*`` imports count. Memoised on the file's bytes."""
    data = path.read_bytes()
    key = (_PKG_DIR, path, hashlib.sha256(data).digest())
    found = _IMPORTED.get(key)
    if found is None:
        found = _IMPORTED[key] = frozenset(_parse_imported(path, data))
    return set(found)


def _parse_imported(path: Path, data: bytes) -> set[Path]:
    package = list(path.relative_to(_PKG_DIR).parent.parts) if path.is_relative_to(_PKG_DIR) else None
    wanted: list[list[str]] = []
    for node in _runtime_imports(ast.parse(data, filename=str(path))):
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
    """sha256[:12] of the code (:func:`module_digest`) of :func:`import_closure` of ``modules``: the code a
    result computed by them depends on. Put it in the key of every result a non-core module computes
    (``dependency_hash(__name__)``)."""
    return _hash_files([_PKG_DIR / p for p in import_closure(*modules)])


@functools.cache
def code_version() -> str:
    """``<__version__>+<dependency_hash of CORE_MODULES>``: the code version in every cache key."""
    return f"{_package_version()}+{dependency_hash(*CORE_MODULES)}"


def script_dependency_hash(script: str | os.PathLike[str]) -> str:
    """sha256[:12] of the code (:func:`module_digest`) of the ``ltvlib`` modules a script outside the package
    (a chapter) imports, directly or not. Not memoised: the script may gain imports while a process runs (each
    file version is parsed once, so a call costs reading the closure's files)."""
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


class DamagedEntryError(ValueError):
    """A cache entry that cannot be what its kind holds: a truncated or corrupt file. Raised by the checks of
    :func:`read_cached`, which reports it and recomputes the entry."""


def report_damaged(path: Path, problem: str) -> None:
    """One warning line, ``ltv-book cache: damaged entry <path> (<problem>); recomputing`` (logger
    ``ltvlib.cache``; shown on stderr when logging is not configured)."""
    _log.warning("ltv-book cache: damaged entry %s (%s); recomputing", path, problem)


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if not isinstance(exc, DamagedEntryError):
        text = f"{type(exc).__name__}: {text}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_safetensors(path: str | os.PathLike[str]) -> None:
    """Check that ``path`` is a whole safetensors file: an 8-byte header length, a JSON header of that length,
    and tensor data that end exactly where the file ends.

    Raises:
        DamagedEntryError: naming what is wrong, e.g. ``truncated safetensors: 2000 bytes, the header
            describes 40128``.
    """
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise DamagedEntryError(f"truncated safetensors: {size} bytes, not even the 8-byte header length")
        n = int.from_bytes(head, "little")
        if 8 + n > size:
            raise DamagedEntryError(f"truncated safetensors: {size} bytes, the header alone needs {8 + n}")
        raw = fh.read(n)
    try:
        header = json.loads(raw)
    except ValueError as exc:  # UnicodeDecodeError included
        raise DamagedEntryError(f"corrupt safetensors header: {_one_line(exc)}") from exc
    if not isinstance(header, dict):
        raise DamagedEntryError(f"corrupt safetensors header: a JSON {type(header).__name__}, not an object")
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            raise DamagedEntryError(f"corrupt safetensors header: tensor {name!r} has no data_offsets")
        end = max(end, offsets[1])
    if 8 + n + end > size:
        raise DamagedEntryError(f"truncated safetensors: {size} bytes, the header describes {8 + n + end}")
    if 8 + n + end < size:
        raise DamagedEntryError(f"safetensors with {size - 8 - n - end} stray bytes after the tensor data")


def _damage_errors() -> tuple[type[BaseException], ...]:
    """What a loader raises on a damaged file: the checks' own error, value and key errors of the metadata
    (``json.JSONDecodeError``, ``UnicodeDecodeError``), a short read, and safetensors' own error. Errors of
    other types (a bug in the loader) are not taken for damage and propagate."""
    errors: tuple[type[BaseException], ...] = (DamagedEntryError, ValueError, KeyError, EOFError)
    try:
        from safetensors import SafetensorError
    except ImportError:  # pragma: no cover - safetensors is a dependency
        return errors
    return (*errors, SafetensorError)


def read_cached(path: str | os.PathLike[str], load: Callable[[Path], T]) -> T | None:
    """``load(path)`` for a cache entry that may be missing or damaged.

    A ``.safetensors`` file is first checked whole (:func:`check_safetensors`); then ``load`` reads it. When
    the check or the load fails as a damaged file does (:func:`_damage_errors`), the file is reported in one
    warning line (:func:`report_damaged`) and None is returned, so the caller recomputes the entry and
    rewrites it (atomically, e.g. with :func:`atomic_write_bytes`, which the vectors' ``save`` methods use).

    Args:
        path: the entry, usually from :func:`cache_path`.
        load: reads the entry, e.g. ``LearnedTaskVector.load``.

    Returns:
        What ``load`` returned, or None when the file is missing or damaged.
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        if path.suffix == ".safetensors":
            check_safetensors(path)
        return load(path)
    except _damage_errors() as exc:
        report_damaged(path, _one_line(exc))
        return None


def cached_file(
    path: str | os.PathLike[str],
    compute: Callable[[], T],
    *,
    load: Callable[[Path], T],
    save: Callable[[T, Path], object],
) -> T:
    """The entry at ``path``: read with ``load`` when it is there and whole (:func:`read_cached`), else
    ``compute()`` written with ``save(value, path)``.

    Args:
        path: the entry, usually from :func:`cache_path`.
        compute: called on a miss or a damaged entry.
        load: reads an entry, e.g. ``VanillaTaskVector.load``.
        save: writes ``value`` to ``path`` atomically (readers see the old file or the new one), e.g.
            ``lambda v, p: v.save(p)``.

    Returns:
        The loaded or computed value (a computed value as ``compute`` returned it, not read back).
    """
    path = Path(path)
    found = read_cached(path, load)
    if found is not None:
        return found
    value = compute()
    save(value, path)
    return value


def cached_json(kind: str, config: Any, compute: Callable[[], dict]) -> dict:
    """Return ``compute()``, memoised in ``results/<kind>/<key>.json``.

    Args:
        kind: result family, e.g. ``"icl_baseline"``; becomes a directory.
        config: what the result depends on; hashed by :func:`config_key`.
        compute: called only on a miss; must return a JSON-serialisable dict.

    Returns:
        The stored value (tuples come back as lists, identical on hit and miss).

    The config and code version are stored beside the value so a cache file
    can be understood without the code that wrote it. A damaged file (truncated in transit, or from an older,
    non-atomic writer) is reported in one warning line (:func:`report_damaged`), recomputed and rewritten.
    """
    path = cache_path(kind, config, ".json", area="results")
    if path.exists():
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(record, dict) or not isinstance(record.get("value"), dict):
                raise DamagedEntryError("not a result record: no 'value' object")
            return record["value"]
        except ValueError as exc:  # DamagedEntryError, json.JSONDecodeError, UnicodeDecodeError
            problem = _one_line(exc) if isinstance(exc, DamagedEntryError) else f"corrupt JSON: {_one_line(exc)}"
            report_damaged(path, problem)
    value = compute()
    if not isinstance(value, dict):
        raise TypeError(f"cached_json: compute() must return dict, got {type(value).__name__}")
    record = {"kind": kind, "config": canonical(config), "code_version": code_version(), "value": value}
    # keys stay in the order compute() made them: tables and plots built from a result list its rows and
    # columns in that order, and a sorted file would show a warm run in another order than a cold one
    atomic_write_json(path, record, sort_keys=False)
    # return what a later call will read, so first and cached runs agree exactly
    return json.loads(json.dumps(value))
