"""The hook helper: hooks come off on exit and on exceptions, calls are counted, a hook that had to run and
did not is an error; hidden states read and replaced whether passed positionally or by keyword, returned as a
tensor or a tuple."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ltvlib.hooks import (
    Hook,
    HookNotFiredError,
    first_input,
    first_output,
    hooked,
    with_first_input,
    with_first_output,
)
from ltvlib.inject import HookNotFiredError as ReExported


class Block(nn.Module):
    """A decoder-block stand-in: doubles its input; returns a tensor or a tuple like transformers 4."""

    def __init__(self, as_tuple: bool = False) -> None:
        super().__init__()
        self.as_tuple = as_tuple

    def forward(self, hidden_states: torch.Tensor, scale: float = 1.0):
        out = 2 * hidden_states * scale
        return (out, "extra") if self.as_tuple else out


def _count(module: nn.Module) -> int:
    return len(module._forward_pre_hooks) + len(module._forward_hooks)


def test_hooks_counted_and_removed_on_exit():
    block, x = Block(), torch.ones(2, 3)
    with hooked([(block, "pre", lambda m, a, k: None), Hook(block, "post", lambda m, a, k, o: None)]) as calls:
        assert _count(block) == 2
        block(x)
        block(hidden_states=x)
        block(x)
    assert calls == [3, 3]
    assert _count(block) == 0


def test_hooks_removed_on_exception_and_not_checked():
    block = Block()
    with pytest.raises(RuntimeError, match="boom"), hooked([(block, "pre", lambda m, a, k: None, "never")]):
        raise RuntimeError("boom")  # the body's error wins over the unfired hook
    assert _count(block) == 0


def test_hooks_removed_when_a_hook_raises():
    block = Block()

    def bad(m, a, k):
        raise ValueError("inside the hook")

    with pytest.raises(ValueError, match="inside the hook"), hooked([(block, "pre", bad)]):
        block(torch.ones(1))
    assert _count(block) == 0


def test_a_required_hook_that_never_fired_is_an_error():
    used, unused = Block(), Block()
    with pytest.raises(HookNotFiredError, match=r"probe hooks at layer 7 never fired"):
        with hooked([(used, "pre", lambda m, a, k: None, "layer 3"), (unused, "post", lambda m, a, k, o: None,
                                                                         "layer 7")], what="probe hooks"):
            used(torch.ones(1))
    assert _count(used) == _count(unused) == 0
    with hooked([(unused, "pre", lambda m, a, k: None, "optional", False)]) as calls:
        pass
    assert calls == [0]
    assert ReExported is HookNotFiredError  # still importable from ltvlib.inject


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="unknown hook kind 'around'"), hooked([(Block(), "around", print)]):
        pass


@pytest.mark.parametrize("keyword", [False, True])
def test_pre_hook_replaces_the_input_positional_or_keyword(keyword):
    block, x = Block(), torch.ones(2, 3)
    seen = {}

    def pre(m, args, kwargs):
        h = first_input(args, kwargs)
        seen["h"] = h
        return with_first_input(args, kwargs, h + 1)

    with hooked([(block, "pre", pre)]):
        out = block(hidden_states=x, scale=3.0) if keyword else block(x, 3.0)
    assert seen["h"] is x
    assert torch.equal(out, 2 * (x + 1) * 3.0)  # the other arguments pass through unchanged
    assert torch.equal(x, torch.ones(2, 3))


def test_first_input_without_hidden_state_names_the_keywords():
    with pytest.raises(ValueError, match=r"no positional input and no hidden_states keyword among \['x'\]"):
        first_input((), {"x": 1})
    with pytest.raises(ValueError, match="no positional input"):
        with_first_input((), {"x": 1}, torch.ones(1))


@pytest.mark.parametrize("as_tuple", [False, True])
def test_post_hook_replaces_tensor_or_tuple_output(as_tuple):
    block, x = Block(as_tuple), torch.ones(2, 3)

    def post(m, args, kwargs, output):
        return with_first_output(output, first_output(output) - 5)

    with hooked([(block, "post", post)]):
        out = block(x)
    if as_tuple:
        assert isinstance(out, tuple) and out[1] == "extra"
        out = out[0]
    assert torch.equal(out, 2 * x - 5)
    assert torch.equal(first_output((x, None)), x) and first_output(x) is x
