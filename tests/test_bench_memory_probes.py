"""bench/first_pass_memory.py and bench/chapter02_memory.py: the memory probes measure what they say."""

from __future__ import annotations

import datetime as dt
import os

import pytest
import torch

from ltvlib import forward
from ltvlib.forward import PromptRunner
from ltvlib.prompts import answer_ids, encode_prompts
from ltvlib.tasks import get_task, load_splits
from tests.bench_scripts import load_bench

first_pass_memory = load_bench("first_pass_memory")
chapter02_memory = load_bench("chapter02_memory")


def test_tail_view_reads_the_kept_columns_and_refuses_earlier_ones():
    x = torch.arange(2 * 10 * 3, dtype=torch.float32).reshape(2, 10, 3)
    view = first_pass_memory._TailView(x[:, -4:].clone(), 6)
    torch.testing.assert_close(view[1, 7:9], x[1, 7:9], rtol=0, atol=0)
    torch.testing.assert_close(view[0, 6:10], x[0, 6:10], rtol=0, atol=0)
    with pytest.raises(AssertionError):
        view[0, 5:7]


@pytest.mark.parametrize("first_layer", [0, 2])
def test_the_tail_only_record_prefills_the_same_caches(llama, monkeypatch, first_layer):
    """The prototype the benchmark measures computes what the library's first pass computes (so its memory is
    comparable): same keys, values and tail/answer states for left-padded rows of different lengths."""
    task = get_task("antonym")
    train = list(load_splits(task).train)
    demos = [train[10 + 2 * i : 10 + 2 * i + i % 3] for i in range(6)]
    prompts = encode_prompts(llama.tokenizer, task, train[:6], demos=demos)
    answers = answer_ids(llama.tokenizer, task, [e.output for e in train[:6]])
    library = PromptRunner(llama, prompts, tail=2, first_layer=first_layer)
    assert library.prefill(answers) == 6
    monkeypatch.setattr(forward, "record_residual", first_pass_memory.tail_record(8))
    tail_only = PromptRunner(llama, prompts, tail=2, first_layer=first_layer)
    assert tail_only.prefill(answers) == 6
    for i in range(6):
        a, b = library.rows[i], tail_only.rows[i]
        torch.testing.assert_close(a.keys, b.keys, rtol=0, atol=0)
        torch.testing.assert_close(a.values, b.values, rtol=0, atol=0)
        assert a.states.keys() == b.states.keys() and a.states
        for k in a.states:
            torch.testing.assert_close(a.states[k], b.states[k], rtol=0, atol=0)


def test_cache_copy_leaves_out_the_files_of_the_window(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    for name, hour in [("results/a/early.json", 5), ("vectors/ltv/inside.safetensors", 6), ("results/b/late.json", 7)]:
        f = src / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(name)
        t = dt.datetime(2026, 12, 4, hour, 30).timestamp()
        os.utime(f, (t, t))
    (src / "models").mkdir()
    dst.mkdir()
    dropped = chapter02_memory._copy_cache(src, dst, dt.datetime(2026, 12, 4, 6), dt.datetime(2026, 12, 4, 7))
    assert dropped == 1
    assert (dst / "results/a/early.json").read_text() == "results/a/early.json"
    assert (dst / "results/b/late.json").exists() and not (dst / "vectors/ltv/inside.safetensors").exists()
    assert (dst / "models").is_symlink() and (dst / "models").resolve() == (src / "models").resolve()
