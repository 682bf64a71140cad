"""Prompt building: the paper's template, identical ids on every path, clear errors."""

from __future__ import annotations

import random
import re

import pytest

from ltvlib.prompts import answer_ids, encode_prompts, pad_left, positions_from_mask, sample_demos
from ltvlib.tasks import Example, Task, get_task


def test_zero_and_few_shot_text():
    task = get_task("antonym")
    q = [Example("hot", "cold")]
    demos = [[Example("up", "down"), Example("big", "small")]]
    enc = encode_prompts(_tok(), task, q, demos=demos)
    assert enc.texts[0] == "Q: up\nA: down\n\nQ: big\nA: small\n\nQ: hot\nA:"
    assert encode_prompts(_tok(), task, q).texts[0] == "Q: hot\nA:"


def test_shared_block_and_per_row_demos_give_the_same_ids():
    task = get_task("antonym")
    demos = [Example("up", "down"), Example("big", "small")]
    q = [Example("hot", "cold"), Example("wet", "dry")]
    shared = encode_prompts(_tok(True), task, q, shared_demos=demos)
    per_row = encode_prompts(_tok(True), task, q, demos=[demos, demos])
    assert shared.full_rows() == per_row.full_rows()
    assert shared.shared[0] == _tok(True).bos_token_id


def test_label_that_tokenises_to_nothing_is_named():
    task = Task(name="blank", kind="generation", answer_template="{y}", files=("fv/antonym.json",))
    with pytest.raises(ValueError, match="label '' of task 'blank' tokenises to nothing"):
        answer_ids(_tok(), task, [""])
    assert answer_ids(_tok(), get_task("antonym"), ["cold"]) == [[_tok().convert_tokens_to_ids("cold")]]


def _spacy_tokenizer():
    """A word-level tokenizer that keeps each space as a token, as byte-level BPE tokenizers (SmolLM2's
    ``Ġ``) do: there ``" " + ""`` is one real token, not nothing."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "[PAD]": 1, " ": 2, "\n": 3, "yes": 4, "no": 5}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"\s|\w+|[^\w\s]"), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


@pytest.mark.parametrize("label", ["", "  ", "\n"])
def test_label_that_tokenises_to_whitespace_is_named(label):
    tok = _spacy_tokenizer()
    task = Task(name="yesno", kind="classification", labels=("yes", label), files=("sst2/train.jsonl",))
    assert tok(task.format_answer(label), add_special_tokens=False).input_ids  # the space is a real token here
    with pytest.raises(ValueError, match=re.escape(f"label {label!r} of task 'yesno' tokenises to whitespace only")):
        answer_ids(tok, task, ["yes", label])
    assert answer_ids(tok, task, ["yes", "no"]) == [[2, 4], [2, 5]]


def test_demos_exclude_the_query_and_are_seeded():
    pool = [Example(str(i), str(i)) for i in range(10)]
    a = sample_demos(pool, 5, random.Random(0), exclude="3")
    assert "3" not in {e.input for e in a}
    assert a == sample_demos(pool, 5, random.Random(0), exclude="3")
    with pytest.raises(ValueError, match="asked for 11"):
        sample_demos(pool, 11, random.Random(0))


def test_padding_and_positions():
    ids, mask = pad_left([[5, 6, 7], [8]], 0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert positions_from_mask(mask).tolist() == [[0, 1, 2], [0, 0, 0]]
    assert positions_from_mask(mask, start=4).tolist() == [[4, 5, 6], [4, 4, 4]]


_TOKS = {}


def _tok(bos: bool = False):
    from tests.models_fixtures import tiny_tokenizer

    if bos not in _TOKS:
        _TOKS[bos] = tiny_tokenizer(add_bos=bos)
    return _TOKS[bos]
