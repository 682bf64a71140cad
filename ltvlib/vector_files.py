"""Reading a saved task vector of any kind: which kind a safetensors file holds, and the vector itself.

Sits above the three kinds (:mod:`ltvlib.ltv`, :mod:`ltvlib.baselines.function_vector`,
:mod:`ltvlib.baselines.vanilla_tv`), which import the protocol's helpers from :mod:`ltvlib.task_vector`:
keeping the dispatch here keeps the imports one way.

Example::

    v = load_task_vector("antonym.safetensors")
    with v.apply(lm):
        ...
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .task_vector import KINDS, TaskVector

__all__ = ["load_task_vector", "vector_kind"]


def _metadata(path: str | Path) -> dict[str, str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata() or {})


def vector_kind(path: str | Path) -> str:
    """Which kind of vector a safetensors file holds: ``"ltv"``, ``"function_vector"`` or ``"vanilla_tv"``.

    Raises:
        ValueError: a safetensors file of none of those kinds (the message names the file and the keys found).
        FileNotFoundError: no such file.
    """
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such vector file")
    meta = _metadata(path)
    found = [k for k in KINDS if k in meta]
    if len(found) != 1:
        raise ValueError(
            f"{path}: not a saved task vector; expected exactly one of the metadata keys {list(KINDS)}, found "
            f"{sorted(meta)}"
        )
    return found[0]


def load_task_vector(path: str | Path) -> TaskVector:
    """Read a learned, function or vanilla task vector, whichever the file holds (dispatch on its metadata key).

    Returns:
        a :class:`~ltvlib.ltv.LearnedTaskVector`, :class:`~ltvlib.baselines.function_vector.FunctionVector`
        or :class:`~ltvlib.baselines.vanilla_tv.VanillaTaskVector` (each a :class:`TaskVector`).

    Raises:
        ValueError: not a saved task vector (see :func:`vector_kind`).
        FileNotFoundError: no such file.
    """
    kind = vector_kind(path)
    cls: Any
    if kind == "ltv":
        from .ltv import LearnedTaskVector as cls
    elif kind == "function_vector":
        from .baselines.function_vector import FunctionVector as cls
    else:
        from .baselines.vanilla_tv import VanillaTaskVector as cls
    return cls.load(path)
