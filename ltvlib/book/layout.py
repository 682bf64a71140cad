"""Where the book's parts are: its chapters (from ``_toc.yml``), the default setting whose outputs are committed,
the staging folder of any other setting, and where chapters record their verdicts.

A leaf of :mod:`ltvlib.book`: the runner (:mod:`ltvlib.book.runner`), which executes chapters, and the scorecard
(:mod:`ltvlib.book.scorecard`), which chapters import to record their verdicts, both read these, so neither has
to import the other, and a chapter's code closure holds the scorecard without the runner. Every name is
re-exported by :mod:`ltvlib.book.runner`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "BOOK_ROOT_ENV",
    "CHAPTER_DIR",
    "CLAIMS_DIR",
    "DEFAULT_DEVICE",
    "DEFAULT_MODEL",
    "DEFAULT_PROFILE",
    "DEFAULT_SEED",
    "RUN_LAST",
    "Chapter",
    "claims_root",
    "is_default",
    "load_toc",
    "read_chapters",
    "sanitise",
    "staging_dir",
    "toc_pages",
    "verdict_slug",
]

DEFAULT_PROFILE = "cpu"
DEFAULT_MODEL = "smollm2-135m"
DEFAULT_SEED = 0
DEFAULT_DEVICE = "auto"
CHAPTER_DIR = "chapters"
# Kernels started by the runner find the book root they write results into here (ltvlib.book.scorecard).
BOOK_ROOT_ENV = "LTV_BOOK_ROOT"
# Where chapters record their verdicts on the paper's claims, relative to the book root.
CLAIMS_DIR = Path("results") / "claims"
# Chapters that read the other chapters' results: executed last, re-executed when those results change.
RUN_LAST = ("scorecard",)


@dataclasses.dataclass(frozen=True)
class Chapter:
    name: str  # "00_overview"
    docname: str  # toc entry, "chapters/00_overview"
    root: Path  # book root holding _toc.yml

    @property
    def py(self) -> Path:
        return self.root / f"{self.docname}.py"

    @property
    def ipynb(self) -> Path:
        return self.root / f"{self.docname}.ipynb"


def toc_files(node: Any) -> Iterable[str]:
    """All ``file:`` entries of a jb-book toc, depth first, in reading order."""
    if isinstance(node, dict):
        if isinstance(node.get("root"), str):
            yield node["root"]
        if isinstance(node.get("file"), str):
            yield node["file"]
        for key in ("parts", "chapters", "sections"):
            for child in node.get(key) or []:
                yield from toc_files(child)
    elif isinstance(node, list):
        for child in node:
            yield from toc_files(child)


def strip_ext(entry: str) -> str:
    """A toc entry without its file extension (``.ipynb``, ``.md``, ``.py``, ``.rst``): its docname."""
    for ext in (".ipynb", ".md", ".py", ".rst"):
        if entry.endswith(ext):
            return entry[: -len(ext)]
    return entry


def load_toc(root: Path) -> dict[str, Any]:
    with open(root / "_toc.yml", encoding="utf-8") as fh:
        toc = yaml.safe_load(fh)
    if not isinstance(toc, dict):
        raise TypeError(f"{root / '_toc.yml'}: expected a mapping, got {type(toc).__name__}")
    return toc


def toc_pages(root: Path) -> list[str]:
    """Docnames (no extension) of every page in the toc, in order."""
    return [strip_ext(f) for f in toc_files(load_toc(root))]


def read_chapters(root: Path) -> list[Chapter]:
    """Executable chapters: toc pages under ``chapters/``, in toc order."""
    out = []
    for doc in toc_pages(root):
        if doc.startswith(f"{CHAPTER_DIR}/"):
            out.append(Chapter(name=doc.split("/")[-1], docname=doc, root=root))
    return out


def sanitise(text: str) -> str:
    """File-name-safe form of a model id: ``meta-llama/Llama-3.1-8B`` -> ``meta-llama_Llama-3.1-8B``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "_"


def is_default(params: dict[str, Any]) -> bool:
    """True for the setting whose outputs are committed in ``chapters/``.
    ``device`` is ignored: it changes where the math runs, not what it is."""
    core = {"model", "profile", "seed", "device"}
    return (
        params.get("profile") == DEFAULT_PROFILE
        and params.get("model") == DEFAULT_MODEL
        and params.get("seed", DEFAULT_SEED) == DEFAULT_SEED
        and not (set(params) - core)
    )


def staging_dir(root: Path, params: dict[str, Any]) -> Path:
    """``<root>/_build/runs/<profile>__<model>[__seedN][__<extras-hash>]``."""
    name = f"{sanitise(str(params['profile']))}__{sanitise(str(params['model']))}"
    if params.get("seed", DEFAULT_SEED) != DEFAULT_SEED:
        name += f"__seed{sanitise(str(params['seed']))}"
    extras = {k: v for k, v in params.items() if k not in {"model", "profile", "seed", "device"}}
    if extras:
        digest = hashlib.sha256(json.dumps(extras, sort_keys=True, default=str).encode()).hexdigest()
        name += f"__{digest[:8]}"
    return root / "_build" / "runs" / name


def claims_root(root: Path, params: dict[str, Any]) -> Path:
    """The book root whose ``results/claims/`` a run with ``params`` records into: ``root`` itself only for
    the default setting (the one whose outputs are committed), else :func:`staging_dir`."""
    return root if is_default(params) else staging_dir(root, params)


def verdict_slug(verdict: str) -> str:
    """CSS-class form of a verdict's text: ``"not reproduced"`` -> ``"not-reproduced"``."""
    return re.sub(r"[^a-z0-9]+", "-", verdict.lower()).strip("-") or "unknown"
