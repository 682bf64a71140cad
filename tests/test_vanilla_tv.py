"""Vanilla task vectors: patching a prompt's own state back reproduces its logits; the two forms and the
layer choice behave as documented."""

from __future__ import annotations

import pytest
import torch

from ltvlib.baselines.vanilla_tv import (
    VanillaTaskVector,
    VanillaTVConfig,
    extract_vanilla_tv,
    icl_and_zero_shot_prompts,
    last_token_states,
    select_layer,
    vanilla_task,
)
from ltvlib.forward import PromptRunner
from ltvlib.tasks import Example, get_task, load_splits


@pytest.mark.parametrize("template", ["hendel", "task"])
def test_tv_from_a_prompt_patched_into_it_reproduces_its_logits(tiny, template):
    pool = load_splits("antonym").train[:40]
    config = VanillaTVConfig(shots=3, n_dummy=1, n_contexts=1, template=template)
    tv = extract_vanilla_tv(tiny, "antonym", pool, config)
    icl, _ = icl_and_zero_shot_prompts(tiny, vanilla_task("antonym", template), pool, config)
    assert len(icl) == 1
    for tail in (None, 1):
        runner = PromptRunner(tiny, icl, tail=tail)
        plain, _ = runner.run([0])
        for layer in range(tiny.n_layers):
            patched, _ = runner.run([0], tv.edits(layer))
            torch.testing.assert_close(patched, plain, atol=1e-5, rtol=1e-5)
    # and it does change another prompt
    other = PromptRunner(tiny, icl_and_zero_shot_prompts(tiny, vanilla_task("antonym", template), pool,
                                                         VanillaTVConfig(shots=3, n_dummy=1, n_contexts=1, seed=5,
                                                                         template=template))[0])
    assert not torch.allclose(other.run([0], tv.edits(0, "replace"))[0], other.run([0])[0])


def test_states_are_the_means_and_difference_form(llama):
    pool = load_splits("antonym").train[:40]
    config = VanillaTVConfig(shots=2, n_dummy=2, n_contexts=3, form="difference")
    tv = extract_vanilla_tv(llama, "antonym", pool, config)
    icl, zero = icl_and_zero_shot_prompts(llama, vanilla_task("antonym", "hendel"), pool, config)
    assert len(icl) == 6 and len(zero) == 6
    assert icl.texts[0].startswith("example:") and icl.texts[0].endswith("->")
    # dummy queries of one context share its demonstrations
    assert icl.texts[0].rsplit("\n", 1)[0] == icl.texts[1].rsplit("\n", 1)[0]
    torch.testing.assert_close(tv.icl_states, last_token_states(llama, icl, max_tokens=1).mean(0), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(tv.zero_shot_states, last_token_states(llama, zero).mean(0), atol=1e-5, rtol=1e-5)
    assert tv.mode() == "add" and tv.mode("replace") == "replace"
    torch.testing.assert_close(tv.vector(1), tv.icl_states[1] - tv.zero_shot_states[1])
    torch.testing.assert_close(tv.vector(1, "replace"), tv.icl_states[1])


def test_select_layer_save_load_and_errors(llama, tmp_path):
    splits = load_splits("antonym")
    tv = extract_vanilla_tv(llama, "antonym", splits.train[:40], VanillaTVConfig(shots=2, n_contexts=2, n_dev=8))
    with pytest.raises(ValueError, match="no layer given"):
        tv.edits()
    select_layer(llama, tv, splits.validation)
    assert tv.layer in range(llama.n_layers) and set(tv.dev_accuracy) == set(range(llama.n_layers))
    assert tv.edits()[0].layer == tv.layer
    back = VanillaTaskVector.load(tv.save(tmp_path / "tv.safetensors"))
    assert back.layer == tv.layer and back.dev_accuracy == tv.dev_accuracy and back.config == tv.config
    torch.testing.assert_close(back.icl_states, tv.icl_states)
    with pytest.raises(ValueError, match="layer 3 is out of range"):
        tv.vector(3)
    with pytest.raises(ValueError, match="unknown form"):
        tv.mode("sum")
    with pytest.raises(ValueError, match="unknown template"):
        vanilla_task("antonym", "gpt")
    with pytest.raises(ValueError, match="need at least"):
        extract_vanilla_tv(llama, "antonym", splits.train[:3], VanillaTVConfig())


def test_hendel_template():
    t = vanilla_task("sst2", "hendel")
    assert t.format_demo(Example("good", "positive")) == "example:good->positive"
    assert t.separator == "\n" and t.labels == get_task("sst2").labels


def test_positional_and_keyword_forms_and_scale(llama, tmp_path):
    """``tv.edits(layer, form)`` as before; ``scale`` multiplies the written state (replace form) or the
    added difference; a file saved before a layer was chosen carries no layers and loads as it was."""
    pool = load_splits("antonym").train[:40]
    tv = extract_vanilla_tv(llama, "antonym", pool, VanillaTVConfig(shots=2, n_dummy=1, n_contexts=2))
    (pos,) = tv.edits(1, "difference")
    (kw,) = tv.edits(layer=1, form="difference", scale=1.0)
    assert (pos.layer, pos.site, pos.mode) == (kw.layer, kw.site, kw.mode) == (1, "block_output", "add")
    assert torch.equal(pos.vector, kw.vector)
    (half_replace,) = tv.edits(1, "replace", scale=0.5)
    assert half_replace.mode == "replace" and torch.equal(half_replace.vector, 0.5 * tv.icl_states[1])
    (double_diff,) = tv.edits(2, "difference", scale=2.0)
    torch.testing.assert_close(double_diff.vector, 2.0 * (tv.icl_states[2] - tv.zero_shot_states[2]))
    from safetensors import safe_open

    path = tv.save(tmp_path / "unchosen.safetensors")
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    assert (meta["site"], meta["mode"], meta["layers"], meta["positions"]) == ("block_output", "replace", "[]", "[-1]")
    back = VanillaTaskVector.load(path)
    assert back.layer is None and back.source_task is None  # a registered task is looked up by name
    torch.testing.assert_close(back.edits(1)[0].vector, tv.edits(1)[0].vector)
