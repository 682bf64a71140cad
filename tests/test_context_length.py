"""Prompts past a model's context stop with a clear error, also through the library (not only the command line).

:func:`ltvlib.models.wrap_model` gives a tokenizer that states no bound the model's context
(``max_position_embeddings``), so :func:`ltvlib.prompts.encode_prompts` checks every prompt against it, and
:func:`ltvlib.ltv.train_ltv` checks a task's rows before it reads them into a cache.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ltvlib.evaluate import EvalSet
from ltvlib.ltv import FAST_RECIPE, train_ltv, with_config
from ltvlib.models import LoadedModel, wrap_model
from ltvlib.prompts import ContextLengthError, context_length, tokenizer_limit
from ltvlib.tasks import Task, load_splits, task_rows
from tests.models_fixtures import tiny_tokenizer

HUGE = int(1e30)  # what Hugging Face's tokenizers state when no bound is known


def tiny_llama_with_context(positions: int) -> LoadedModel:
    """The tiny Llama's shape with a context of ``positions``, its tokenizer stating no bound."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tiny_tokenizer(add_bos=False)
    tok.model_max_length = HUGE
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=positions, pad_token_id=0, bos_token_id=None,
        eos_token_id=3, tie_word_embeddings=False,
    )
    return wrap_model(LlamaForCausalLM(config).float(), tok, f"tiny-llama-{positions}")


def long_rows_file(tmp_path: Path) -> tuple[Path, int]:
    """40 antonym rows, the 8th with an input of 60 words: its prompt and answer take 66 tokens (``Q``, ``:``,
    60 words, newline, ``A``, ``:`` and one answer token), past a 48-position context."""
    rows = [{"input": e.input, "output": e.output} for e in load_splits("antonym").train[:40]]
    rows[7]["input"] = " ".join(["good"] * 60)
    path = tmp_path / "long_rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, 8


def test_wrap_model_bounds_a_tokenizer_without_one_by_the_models_context() -> None:
    lm = tiny_llama_with_context(48)
    assert context_length(lm) == 48 and tokenizer_limit(lm.tokenizer) == 48
    # a tokenizer that states a real bound keeps it
    from transformers import LlamaForCausalLM

    tok = tiny_tokenizer(add_bos=False)
    tok.model_max_length = 32
    kept = wrap_model(LlamaForCausalLM(lm.model.config), tok, "tiny-llama-32")
    assert tokenizer_limit(kept.tokenizer) == 32


def test_a_row_past_the_context_stops_training_naming_file_line_and_tokens_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("LTV_CACHE_DIR", str(cache))
    lm = tiny_llama_with_context(48)
    path, line = long_rows_file(tmp_path)
    task = Task.from_jsonl(path)
    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=8)
    for cached in (False, True):
        with pytest.raises(ContextLengthError) as err:
            train_ltv(lm, task, layers=[1], recipe=config, n_train=16, n_val=8, cache=cached, progress=False)
        message = str(err.value)
        assert f"{path}:{line}:" in message and "66 tokens" in message and "48 positions" in message, message
        assert "1 of the 40 rows" in message, message
    assert not cache.exists() or not any(cache.rglob("*")), sorted(cache.rglob("*"))  # no vector, no datasets cache


def test_encoding_a_prompt_past_the_context_names_its_file_line_and_tokens(tmp_path: Path) -> None:
    lm = tiny_llama_with_context(48)
    path, line = long_rows_file(tmp_path)
    task = Task.from_jsonl(path)
    examples = [ex for _, _, ex in task_rows(task)]
    with pytest.raises(ContextLengthError, match=rf"{path}:{line}: the zero-shot prompt of this query takes 65 "
                                                 r"tokens, more than the model's context of 48 positions"):
        EvalSet(lm, task, examples)
    EvalSet(lm, task, examples[:7] + examples[8:])  # the other rows fit
