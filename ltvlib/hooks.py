"""Forward hooks that always come off: one helper every module registers its hooks through.

:func:`hooked` registers forward pre-hooks (``"pre"``) and forward hooks (``"post"``), both with the call's
keyword arguments, counts how often each one ran, removes every one of them when the ``with`` block ends
(also when it raises), and raises :class:`HookNotFiredError` when a hook that had to run never did: an
intervention that silently did nothing is the most common bug of activation patching.

The small helpers below read and replace the hidden state a module receives or returns. Decoder blocks get
it positionally or as ``hidden_states=`` depending on the caller (``forward_from_layer`` vs. the model's own
loop), and return a tensor (transformers 5) or a tuple whose first item is the state (older versions).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, NamedTuple

from torch import Tensor, nn

Kind = Literal["pre", "post"]

__all__ = ["Hook", "HookNotFiredError", "first_input", "first_output", "hooked", "with_first_input",
           "with_first_output"]


class HookNotFiredError(RuntimeError):
    """A hook that should have changed or recorded the forward pass never ran."""


class Hook(NamedTuple):
    """One hook for :func:`hooked`.

    Attributes:
        module: the module to hook.
        kind: ``"pre"``: ``fn(module, args, kwargs)`` runs before ``module.forward`` and returns None (inputs
            unchanged) or ``(args, kwargs)``; ``"post"``: ``fn(module, args, kwargs, output)`` runs after it and
            returns None (output unchanged) or the new output.
        fn: the hook.
        name: how error messages call it (e.g. ``"layer 3 block_input"``).
        required: whether it must run at least once inside the ``with`` block.
    """

    module: nn.Module
    kind: Kind
    fn: Callable[..., Any]
    name: str = ""
    required: bool = True


@contextmanager
def hooked(
    hooks: Sequence[Hook | tuple], *, what: str = "hooks"
) -> Iterator[list[int]]:
    """Register ``hooks`` for the ``with`` body; yields the number of calls of each (a list, in order).

    Args:
        hooks: :class:`Hook` values or plain tuples ``(module, "pre" | "post", fn[, name[, required]])``.
        what: what the hooks are, for the error message (e.g. ``"injection hooks"``).

    Raises:
        ValueError: a kind other than ``"pre"`` or ``"post"``.
        HookNotFiredError: (on a normal exit) a required hook never ran. After an exception in the body only
            that exception propagates: the hooks are removed and nothing is checked.
    """
    specs = [h if isinstance(h, Hook) else Hook(*h) for h in hooks]
    for spec in specs:
        if spec.kind not in ("pre", "post"):
            raise ValueError(f"unknown hook kind {spec.kind!r}; allowed: 'pre', 'post'")
    calls = [0] * len(specs)
    handles = []
    try:
        for i, spec in enumerate(specs):
            # Counted before the call: a hook that runs and then raises has still run.
            if spec.kind == "pre":

                def pre(module: Any, args: tuple, kwargs: dict, i: int = i, fn: Callable = spec.fn) -> Any:
                    calls[i] += 1
                    return fn(module, args, kwargs)

                handles.append(spec.module.register_forward_pre_hook(pre, with_kwargs=True))
            else:

                def post(module: Any, args: tuple, kwargs: dict, output: Any, i: int = i,
                         fn: Callable = spec.fn) -> Any:
                    calls[i] += 1
                    return fn(module, args, kwargs, output)

                handles.append(spec.module.register_forward_hook(post, with_kwargs=True))
        yield calls
    finally:
        for handle in handles:
            handle.remove()
    silent = [spec.name or f"#{i}" for i, spec in enumerate(specs) if spec.required and calls[i] == 0]
    if silent:
        raise HookNotFiredError(f"{what} at {', '.join(silent)} never fired: no forward ran through them")


def first_input(args: tuple, kwargs: dict) -> Tensor:
    """The hidden state a module was called with: its first positional argument, else ``hidden_states=``."""
    if args:
        return args[0]
    if "hidden_states" in kwargs:
        return kwargs["hidden_states"]
    raise ValueError(f"no positional input and no hidden_states keyword among {sorted(kwargs)}")


def with_first_input(args: tuple, kwargs: dict, new: Tensor) -> tuple[tuple, dict]:
    """``(args, kwargs)`` with the hidden state replaced by ``new``, where the call had it (pre-hook return)."""
    if args:
        return (new, *args[1:]), kwargs
    if "hidden_states" not in kwargs:
        raise ValueError(f"no positional input and no hidden_states keyword among {sorted(kwargs)}")
    return args, {**kwargs, "hidden_states": new}


def first_output(output: Any) -> Tensor:
    """The hidden state a module returned: the output itself, or the first item of a tuple."""
    return output[0] if isinstance(output, tuple) else output


def with_first_output(output: Any, new: Tensor) -> Any:
    """``output`` with its hidden state replaced by ``new``, in the same form (tensor or tuple)."""
    return (new, *output[1:]) if isinstance(output, tuple) else new
