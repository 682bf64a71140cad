"""In-memory memos per model: the prompt sets, runners and probes that measuring code reuses between calls.

Each model carries its own store, an attribute of its ``torch.nn.Module``, so an entry lives as long as its model
and no longer: a freed model takes its entries with it, and a model loaded later never finds another model's
entries (a key holding ``id(model)`` could: CPython reuses the id of a freed object). Entries usually hold their
model (a runner keeps ``lm``); that cycle is collected with the model once nothing else holds it.

A store is divided into namespaces, one per memo (e.g. ``"ltvs.test_sets"``); a namespace may keep only its
last ``keep`` entries, the oldest stored dropped first, before the new one is built (a hit does not refresh an
entry), and may bound the bytes its entries hold together (``max_bytes``), alone or with the other namespaces
that name the same ``budget`` (the oldest stored entry among them dropped first). :func:`clear_memory` empties every model's store and the prompt store (:mod:`ltvlib.prompt_store`),
then collects garbage, so a model the caller deleted is freed before the next one loads.

A copy of a model (``copy.deepcopy``, pickling) starts with an empty store of its own.
"""

from __future__ import annotations

import gc
import itertools
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .models import LoadedModel

__all__ = ["clear_memory", "entries", "memo", "model_serial"]

_ATTRIBUTE = "_ltvlib_memo"
_MODELS: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()  # every module that has a store
_SERIALS = itertools.count(1)


class _Store:
    """One model's memos: ``namespaces[name]`` maps keys to values in the order they were stored; ``serial``
    numbers the model for the life of the process (never reused)."""

    def __init__(self) -> None:
        self.serial = next(_SERIALS)
        self.namespaces: dict[str, OrderedDict[Hashable, Any]] = {}
        #: every (namespace, key) in the order stored, across namespaces (entries since dropped are skipped)
        self.order: OrderedDict[tuple[str, Hashable], None] = OrderedDict()
        #: budget name -> the namespaces bounded together under it
        self.budgets: dict[str, set[str]] = {}

    def __deepcopy__(self, memo: dict) -> _Store:
        return _Store()

    def __reduce__(self) -> tuple[type, tuple]:
        return _Store, ()


def _module(lm: LoadedModel) -> torch.nn.Module:
    """The module a store hangs on: ``lm`` itself when it is a module, else ``lm.model`` (a loaded model)."""
    return lm if isinstance(lm, torch.nn.Module) else lm.model


def _store(lm: LoadedModel) -> _Store:
    module = _module(lm)
    store = module.__dict__.get(_ATTRIBUTE)
    if store is None:
        store = module.__dict__[_ATTRIBUTE] = _Store()
    _MODELS.add(module)
    return store


def entries(lm: LoadedModel, namespace: str) -> OrderedDict[Hashable, Any]:
    """The live entries of ``namespace`` in ``lm``'s store (created empty on first use)."""
    return _store(lm).namespaces.setdefault(namespace, OrderedDict())


def memo(
    lm: LoadedModel, namespace: str, key: Hashable, build: Callable[[], Any], keep: int | None = None, *,
    reuse: Callable[[Any], bool] | None = None, max_bytes: int | None = None,
    nbytes: Callable[[Any], int] | None = None, budget: str | None = None,
) -> Any:
    """The value stored under ``key`` in ``namespace`` of ``lm``'s store, else ``build()``, stored there.

    Args:
        lm: a loaded model (:func:`ltvlib.models.load_model`) or a ``torch.nn.Module``; the key need not name it.
        namespace: the memo's name; one per call site (or per set of call sites sharing a bound).
        key: what else the value depends on (hashable).
        build: computes the value on a miss.
        keep: at most this many entries in the namespace: on a miss the oldest stored are dropped first, before
            ``build`` runs (None: unbounded).
        reuse: a stored value for which ``reuse(value)`` is false is dropped and rebuilt.
        max_bytes: with ``nbytes``, a bound on the bytes the namespace's entries hold together (``nbytes(value)``
            each), checked at every call, hit or miss: the oldest stored entries other than the one asked for are
            dropped while the total exceeds it (values that grow after they are stored, such as test sets
            caching prompts as they are evaluated, are measured as they are now).
        nbytes: the bytes a stored value holds (required with ``max_bytes``).
        budget: with ``max_bytes``, bound this namespace together with every other namespace of ``lm``'s store
            that names the same budget (their values must be of a kind ``nbytes`` measures): the oldest stored
            entry among them is dropped first, whichever namespace holds it. None: the namespace alone.
    """
    if (max_bytes is None) != (nbytes is None):
        raise ValueError(f"memo {namespace!r}: max_bytes and nbytes go together, got {max_bytes!r} and {nbytes!r}")
    if budget is not None and max_bytes is None:
        raise ValueError(f"memo {namespace!r}: budget {budget!r} needs max_bytes and nbytes")
    owner = _store(lm)
    members = owner.budgets.setdefault(budget, set()) if budget is not None else {namespace}
    members.add(namespace)
    store = entries(lm, namespace)
    if key in store and reuse is not None and not reuse(store[key]):
        del store[key]
        owner.order.pop((namespace, key), None)
    if key in store:
        value = store[key]
    else:
        if keep is not None:
            while store and len(store) >= keep:
                dropped, _ = store.popitem(last=False)
                owner.order.pop((namespace, dropped), None)
        _bound_bytes(owner, members, None, max_bytes, nbytes)
        value = store[key] = build()
        if max_bytes is not None:  # only bounded namespaces need the order across namespaces
            owner.order[(namespace, key)] = None
    _bound_bytes(owner, members, (namespace, key), max_bytes, nbytes)
    return value


def _bound_bytes(owner: _Store, members: set[str], spare: tuple[str, Hashable] | None, max_bytes: int | None,
                 nbytes: Callable[[Any], int] | None) -> None:
    """Drop the oldest stored entries of the namespaces ``members`` but ``spare`` while they hold more than
    ``max_bytes`` together."""
    if max_bytes is None or nbytes is None:
        return
    stores = [owner.namespaces.setdefault(name, OrderedDict()) for name in sorted(members)]
    while sum(nbytes(v) for store in stores for v in store.values()) > max_bytes:
        oldest = None
        for name, key in list(owner.order):
            if key not in owner.namespaces.get(name, {}):
                del owner.order[(name, key)]  # dropped since (keep, reuse or a clear)
            elif name in members and (name, key) != spare:
                oldest = (name, key)
                break
        if oldest is None:
            return
        del owner.namespaces[oldest[0]][oldest[1]]
        del owner.order[oldest]


def model_serial(lm: LoadedModel) -> int:
    """A number naming ``lm``'s model for the life of the process, never given to another model (unlike
    ``id``): for keys of caches that outlive no model but are shared between models (the prompt store)."""
    return _store(lm).serial


def clear_memory() -> None:
    """Drop every model's memos and the prompt store's entries, collect garbage and, on CUDA, return the freed
    cache to the driver. A model's serial number stays."""
    from . import prompt_store

    for module in list(_MODELS):
        store = module.__dict__.get(_ATTRIBUTE)
        if store is not None:
            store.namespaces.clear()
            store.order.clear()
    prompt_store.STORE.entries.clear()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
