"""One protocol for every task vector: learned (:class:`~ltvlib.ltv.LearnedTaskVector`), function
(:class:`~ltvlib.baselines.function_vector.FunctionVector`) and vanilla
(:class:`~ltvlib.baselines.vanilla_tv.VanillaTaskVector`).

A :class:`TaskVector` names its model and task, turns itself into :class:`~ltvlib.inject.VectorEdit` s (where
each vector goes: layer, site, prompt position, add or replace), puts them into a model's forwards with
:meth:`TaskVector.apply` and saves to / loads from safetensors. Every saved file carries, besides its own
metadata (under the key ``"ltv"``, ``"function_vector"`` or ``"vanilla_tv"``), where its edits go: the
metadata keys ``"site"``, ``"mode"``, ``"layers"`` and ``"positions"`` (JSON strings), so a reader can tell
without knowing the class; :func:`ltvlib.vector_files.load_task_vector` reads any of the three and gives back a vector whose
edits are those of the vector that was saved.

Typical use::

    v = load_task_vector("antonym.safetensors")
    with v.apply(lm):                   # at the vector's own layer(s), scale 1
        out = lm.model.generate(**batch)
    with v.apply(lm, layer=5, scale=2.0):
        ...
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .inject import VectorEdit

if TYPE_CHECKING:
    from .models import LoadedModel

__all__ = ["KINDS", "TaskVector", "apply_edits", "placement_metadata"]

KINDS: tuple[str, ...] = ("ltv", "function_vector", "vanilla_tv")
"""The safetensors metadata key that holds each kind's own metadata: learned, function, vanilla."""


@runtime_checkable
class TaskVector(Protocol):
    """What every task vector offers (structural: learned, function and vanilla vectors all conform).

    Attributes:
        model: the model it was made on (registry name, Hugging Face id or folder).
        task: the task's name.
    """

    # read-only in the protocol, so that frozen dataclasses (LearnedTaskVector) conform as well as mutable ones
    @property
    def model(self) -> str: ...

    @property
    def task(self) -> str: ...

    def edits(self, *, layer: int | None = None, scale: float = 1.0) -> list[VectorEdit]:
        """The vector(s) as injections. ``layer``: the block to put them at (None: the vector's own layer or
        layers); ``scale`` multiplies every vector (0 leaves an added vector without effect)."""
        ...

    def apply(self, lm: LoadedModel, *, layer: int | None = None,
              scale: float = 1.0) -> AbstractContextManager[None]:
        """A context manager putting :meth:`edits` into every prompt forward (plain or ``generate``) run
        inside it: ``ltvlib.inject.apply(lm, self.edits(layer=layer, scale=scale))``; hooks removed on exit."""
        ...

    def save(self, path: str | Path) -> Path:
        """Write the vector as safetensors with its metadata, including site and positions (atomically)."""
        ...

    @classmethod
    def load(cls, path: str | Path) -> TaskVector:
        """Read a file written by :meth:`save`."""
        ...


def apply_edits(lm: LoadedModel, edits: list[VectorEdit]) -> AbstractContextManager[None]:
    """:func:`ltvlib.inject.apply` over ``edits``: the body of every conforming vector's ``apply``."""
    from .inject import apply

    return apply(lm, edits)


def placement_metadata(edits: list[VectorEdit]) -> dict[str, str]:
    """Safetensors metadata (string values) saying where ``edits`` go: ``site``, ``mode``, ``layers`` and
    ``positions`` (JSON; layers and positions in the order they first occur).

    Raises:
        ValueError: edits that mix sites or modes (no vector kind makes those).
    """
    sites = {e.site for e in edits}
    modes = {e.mode for e in edits}
    if len(sites) > 1 or len(modes) > 1:
        raise ValueError(f"edits mix sites {sorted(sites)} or modes {sorted(modes)}; one of each expected")
    return {
        "site": next(iter(sites), ""),
        "mode": next(iter(modes), ""),
        "layers": json.dumps(list(dict.fromkeys(e.layer for e in edits))),
        "positions": json.dumps(list(dict.fromkeys(e.position for e in edits))),
    }
