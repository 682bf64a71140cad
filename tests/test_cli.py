"""End-to-end tests of ``python -m ltvlib`` (train, eval) on a tiny random model saved to a local folder."""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ltvlib.cache import cache_root
from ltvlib.cli import main
from ltvlib.ltv import FAST_RECIPE, LearnedTaskVector
from ltvlib.tasks import Task, load_splits
from tests.models_fixtures import tiny_llama

# "43.5 % [36.8, 50.4] (n=200)": an accuracy with its 95 % Wilson interval and n
INTERVAL = r"\d+\.\d % \[\d+\.\d, \d+\.\d\] \(n=\d+\)"
QUICK = ["--epochs", "1", "--samples-per-epoch", "16", "--no-progress", "--n-test", "20"]


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama and its word-level tokenizer, saved as an ordinary Hugging Face folder."""
    lm = tiny_llama()
    folder = tmp_path_factory.mktemp("tiny-llama")
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    return folder


def _write_jsonl(path: Path, rows: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def sentiment_file(tmp_path: Path) -> Path:
    """160 SST-2 sentences (words the tiny tokenizer knows), 75 % positive, outside the repository."""
    pool = load_splits("sst2", balance=False).train
    pos = [e for e in pool if e.output == "positive"][:120]
    neg = [e for e in pool if e.output == "negative"][:40]
    return _write_jsonl(tmp_path / "reviews.jsonl", [{"input": e.input, "output": e.output} for e in pos + neg])


def _line(out: str, what: str) -> str:
    """The printed result line of ``what`` (zero-shot, ICL or LTV)."""
    lines = [ln for ln in out.splitlines() if ln.strip().startswith(what)]
    assert len(lines) == 1, (what, out)
    return lines[0].strip()


def test_train_then_eval_end_to_end(
    model_dir: Path, sentiment_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "runs"
    args = ["train", "--data", str(sentiment_file), "--kind", "classification", "--model", str(model_dir),
            "--layer", "middle", "--shots", "2", "--seed", "3", "--out", str(out_dir), *QUICK]
    assert main(args) == 0
    out = capsys.readouterr().out
    for what in ("zero-shot", "2-shot ICL", "LTV "):
        line = _line(out, what)
        # first-token accuracy and, for classification, the accuracy within the labels
        assert re.search(rf"{INTERVAL}\s+within labels {INTERVAL}", line), line
        assert "(n=20)" in line
    assert "label-balanced" in out

    stem = f"reviews__{model_dir.name}__L1__seed3"
    vector_path, results_path = out_dir / f"{stem}.safetensors", out_dir / f"{stem}.json"
    assert str(vector_path) in out and str(results_path) in out
    assert sorted(p.name for p in out_dir.iterdir()) == sorted([vector_path.name, results_path.name])
    ltv = LearnedTaskVector.load(vector_path)
    assert ltv.vectors.shape == (1, 64) and ltv.layers == (1,) and ltv.positions == (-1,)
    assert ltv.task == "reviews" and ltv.seed == 3
    assert ltv.config.epochs == 1 and ltv.config.samples_per_epoch == 16 and ltv.config.lr == FAST_RECIPE.lr

    record = json.loads(results_path.read_text())
    assert record["task"]["labels"] == ["negative", "positive"]
    balanced = load_splits(Task.from_jsonl(sentiment_file, kind="classification"))
    assert record["splits"] == {"seed": 0, "train": len(balanced.train), "validation": len(balanced.validation),
                                "test": 20, "balanced": True}
    assert len(balanced.train) < 80 and len(balanced.validation) < 40  # fewer than the unbalanced 80 / 40
    ltv_result = record["results"]["LTV"]["first_token"]
    assert ltv_result["n"] == 20 and ltv_result["ci95"][0] <= ltv_result["accuracy"] <= ltv_result["ci95"][1]
    assert sum(record["results"]["LTV"]["predicted_labels"].values()) == 20
    # a tiny random model's vector does not learn: said on the screen and in the record, with the rule's numbers
    training = record["training"]
    assert training["learned"] is False and training["attempts"] == 1 + FAST_RECIPE.retries_without_progress
    assert set(training["learned_rule"]) == {"val_accuracy_wilson_low", "val_queries", "no_vector_val_accuracy",
                                             "majority_val_rate"}
    assert len(record["warnings"]) == 1 and "did not learn" in record["warnings"][0]
    assert "WARNING  the vector did not learn" in out

    # eval on the same file and model recomputes the same prompts in the same order: identical accuracies
    assert main(["eval", "--vector", str(vector_path), "--data", str(sentiment_file), "--kind", "classification",
                 "--n-test", "20"]) == 0
    again = capsys.readouterr().out
    assert _line(again, "LTV ") == _line(out, "LTV ")
    assert _line(again, "zero-shot") == _line(out, "zero-shot")
    assert "ICL" not in again


def test_generation_task_from_json_list(model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    items = [{"input": e.input, "output": e.output} for e in load_splits("antonym").train[:80]]
    data = tmp_path / "opposites.json"
    data.write_text(json.dumps(items, indent=1))
    out_dir = tmp_path / "out"
    assert main(["train", "--data", str(data), "--model", str(model_dir), "--layer", "-1", "--shots", "0",
                 "--out", str(out_dir), *QUICK]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"zero-shot\s+{INTERVAL}$", _line(out, "zero-shot"))
    assert re.search(rf"LTV\s+{INTERVAL}$", _line(out, "LTV "))
    assert "ICL" not in out and "within labels" not in out  # --shots 0 skips ICL; generation has no labels
    assert (out_dir / f"opposites__{model_dir.name}__L2__seed0.safetensors").is_file()


def _fails(args: list[str], capsys: pytest.CaptureFixture[str], *fragments: str) -> None:
    assert main(args) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert err and err[-1].startswith("python -m ltvlib"), captured.err
    for fragment in fragments:
        assert fragment in err[-1], (fragment, err[-1])
    assert captured.out == ""


def test_bad_inputs_exit_2_and_write_nothing(
    model_dir: Path, sentiment_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "never"
    base = ["--out", str(out_dir), *QUICK]
    _fails(["train", "--data", str(sentiment_file), "--model", "no-such-model", *base], capsys, "'no-such-model'")
    _fails(["train", "--data", str(sentiment_file), "--model", str(model_dir), "--layer", "7", *base], capsys,
           "layer 7", "0..2")
    _fails(["train", "--data", str(sentiment_file), "--model", str(model_dir), "--layer", "top", *base], capsys,
           "'top'")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input": "good", "output": "positive"}\n{"input": "bad", "output": \n')
    _fails(["train", "--data", str(bad), "--model", str(model_dir), *base], capsys, f"{bad}:2", "malformed JSON")
    _fails(["train", "--data", str(tmp_path / "absent.jsonl"), *base], capsys, "absent.jsonl", "not found")
    # two labels whose answers start with the same token cannot be scored on the first token
    rows = [{"input": e.input, "output": "not " + e.output[:3]} for e in load_splits("sst2").train[:40]]
    same_start = _write_jsonl(tmp_path / "same_start.jsonl", rows)
    _fails(["train", "--data", str(same_start), "--kind", "classification", "--model", str(model_dir), *base],
           capsys, "'not neg'", "'not pos'", "both start with the token 'not'")
    assert not out_dir.exists()

    # a vector whose width does not fit the model
    vec = tmp_path / "wide.safetensors"
    LearnedTaskVector(vectors=__import__("torch").zeros(1, 32), layers=(1,), positions=(-1,), model="other",
                      task="reviews", recipe="fast", seed=0, shots=0, config=FAST_RECIPE).save(vec)
    _fails(["eval", "--vector", str(vec), "--data", str(sentiment_file), "--model", str(model_dir)],
           capsys, "width 32", "width 64")
    _fails(["eval", "--vector", str(tmp_path / "none.safetensors"), "--task", "antonym"], capsys, "not found")
    _fails(["eval", "--vector", str(vec), "--task", "antonyms"], capsys, "'antonyms'")


@pytest.fixture(scope="module")
def short_context_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama with a context of 48 positions, saved as a Hugging Face folder."""
    lm = tiny_llama()
    lm.model.config.max_position_embeddings = 48
    folder = tmp_path_factory.mktemp("tiny-llama-48")
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    return folder


def _long_rows_file(tmp_path: Path) -> tuple[Path, list[int]]:
    """40 antonym rows, two of them (lines 7 and 31) with inputs of 60 words: past a 48-position context."""
    rows = [{"input": e.input, "output": e.output} for e in load_splits("antonym").train[:40]]
    for i, word in ((6, "good"), (30, "bad")):
        rows[i]["input"] = " ".join([word] * 60)
    return _write_jsonl(tmp_path / "long_rows.jsonl", rows), [7, 31]


def test_rows_past_the_context_stop_train_and_eval_fast_and_write_nothing(
    short_context_dir: Path, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, lines = _long_rows_file(tmp_path)
    out_dir = tmp_path / "never"
    start = time.perf_counter()
    # "Q: good good ... good\nA:" (Q, :, 60 words, newline, A, :: 65 tokens) and " <answer>" (1): 66
    _fails(["train", "--data", str(data), "--model", str(short_context_dir), "--out", str(out_dir), *QUICK],
           capsys, f"{data}:{lines[0]}:", "66 tokens", "context of 48 positions", "2 of the 40 rows",
           f"lines {lines[0]}, {lines[1]}")
    assert time.perf_counter() - start < 30  # a model load and one tokenisation, not minutes of training
    assert not out_dir.exists()
    cache = tmp_path / "cache"
    assert not cache.exists() or not any(cache.rglob("*")), sorted(cache.rglob("*"))  # no datasets cache either
    # eval of a saved vector on that file stops the same way (the vector fits the model)
    vec = tmp_path / "v.safetensors"
    LearnedTaskVector(vectors=__import__("torch").zeros(1, 64), layers=(1,), positions=(-1,), model="tiny",
                      task="x", recipe="fast", seed=0, shots=0, config=FAST_RECIPE).save(vec)
    _fails(["eval", "--vector", str(vec), "--data", str(data), "--model", str(short_context_dir)], capsys,
           f"{data}:{lines[0]}:", "66 tokens", "48 positions")
    assert not cache.exists() or not any(cache.rglob("*"))
    # the same file fits the 512 positions of the other tiny model: only a short training run's worth of checks
    from ltvlib.models import load_model
    from ltvlib.prompts import check_task_context, context_length

    lm = load_model(str(model_dir))
    assert context_length(lm) == 512
    assert check_task_context(Task.from_jsonl(data), lm.tokenizer, context_length(lm)) == 66


def test_icl_prompts_past_the_context_stop_train_before_training(
    short_context_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [{"input": e.input, "output": e.output} for e in load_splits("antonym").train[:40]]
    data = _write_jsonl(tmp_path / "words.jsonl", rows)  # each zero-shot prompt fits 48 positions ...
    out_dir = tmp_path / "never"
    start = time.perf_counter()
    # ... but ten demonstrations (about 9 tokens each) do not
    _fails(["train", "--data", str(data), "--model", str(short_context_dir), "--shots", "10", "--out", str(out_dir),
            *QUICK], capsys, f"{data}:", "10-shot prompt", "context of 48 positions", "--shots 10")
    assert time.perf_counter() - start < 30 and not out_dir.exists()


def test_max_tokens_cuts_the_long_inputs_and_reports_them(
    short_context_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, lines = _long_rows_file(tmp_path)
    out_dir = tmp_path / "out"
    _fails(["train", "--data", str(data), "--model", str(short_context_dir), "--max-tokens", "100", "--out",
            str(out_dir), *QUICK], capsys, "--max-tokens 100", "context of 48 positions")
    assert main(["train", "--data", str(data), "--model", str(short_context_dir), "--max-tokens", "40", "--shots",
                 "0", "--out", str(out_dir), *QUICK]) == 0
    out = capsys.readouterr().out
    assert f"cut 2 input(s) to fit 40 tokens of prompt and answer (--max-tokens; lines {lines[0]}, {lines[1]}" in out
    (results,) = out_dir.glob("*.json")
    record = json.loads(results.read_text())["task"]
    assert record["max_tokens"] == 40 and record["cut_inputs"] == [{"line": lines[0], "tokens": 66},
                                                                   {"line": lines[1], "tokens": 66}]
    from ltvlib.prompts import cut_inputs

    cut = cut_inputs(Task.from_jsonl(data), tiny_llama().tokenizer, 40)
    assert [c.input.split() for c in cut] == [["good"] * 34, ["bad"] * 34]  # 40 - (Q : \n A : answer)


def test_encode_prompts_refuses_a_prompt_past_the_limit_and_names_its_line(tmp_path: Path) -> None:
    from ltvlib.prompts import ContextLengthError, encode_prompts

    data, lines = _long_rows_file(tmp_path)
    task = Task.from_jsonl(data)
    lm = tiny_llama()
    splits = load_splits(task)
    long_ones = [e for e in (*splits.train, *splits.validation, *splits.test) if len(e.input.split()) == 60]
    assert len(long_ones) == 2
    encode_prompts(lm.tokenizer, task, long_ones)  # the tiny tokenizer states no bound: nothing checked
    with pytest.raises(ContextLengthError, match=rf"{re.escape(str(data))}:({lines[0]}|{lines[1]}): .*65 tokens.*48"):
        encode_prompts(lm.tokenizer, task, long_ones, max_tokens=48)
    lm.tokenizer.model_max_length = 48  # a tokenizer that states its model's context is checked by default
    try:
        with pytest.raises(ContextLengthError, match="65 tokens"):
            encode_prompts(lm.tokenizer, task, long_ones)
    finally:
        lm.tokenizer.model_max_length = int(1e30)


def test_module_help_lists_examples(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # `python -m ltvlib --help` in this process: runpy runs the package's __main__ as -m does (a child interpreter
    # would only add seconds of imports); test_train_command_on_the_embedded_model runs -m in a subprocess
    monkeypatch.setattr(sys, "argv", ["ltvlib", "--help"])
    with pytest.raises(SystemExit) as done:
        runpy.run_module("ltvlib", run_name="__main__", alter_sys=True)
    out = capsys.readouterr().out
    assert done.value.code in (0, None)
    assert "examples:" in out
    assert "python -m ltvlib train --data my_task.jsonl --model smollm2-135m --layer middle" in out
    assert "python -m ltvlib eval --vector" in out



# The cache this session was started with (the autouse fixture moves LTV_CACHE_DIR to a tmp folder), read at
# import: the real-model test borrows its dequantised models.
_MODELS = cache_root() / "models"


@pytest.mark.realmodel
def test_train_command_on_the_embedded_model(tmp_path: Path) -> None:
    """The README's command as a user runs it: a JSONL file outside the repository, the embedded SmolLM2-135M,
    offline, in a subprocess; sizes cut so that it takes about a minute."""
    outside = tmp_path / "outside"
    outside.mkdir()
    pool = load_splits("sst2", balance=False).train[:160]
    data = _write_jsonl(outside / "reviews.jsonl", [{"input": e.input, "output": e.output} for e in pool])
    cache = tmp_path / "user-cache"
    cache.mkdir()
    (cache / "models").symlink_to(_MODELS, target_is_directory=True)
    env = {**os.environ, "LTV_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "ltvlib", "train", "--data", str(data), "--kind", "classification",
           "--model", "smollm2-135m", "--layer", "middle", "--shots", "2", "--epochs", "2",
           "--samples-per-epoch", "64", "--n-test", "24", "--no-progress", "--out", str(outside / "runs")]
    run = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, cwd=outside, timeout=900)
    assert run.returncode == 0, run.stderr
    for what in ("zero-shot", "2-shot ICL", "LTV "):
        assert re.search(INTERVAL, _line(run.stdout, what)), run.stdout
    saved = sorted((outside / "runs").glob("*.safetensors"))
    assert len(saved) == 1
    ltv = LearnedTaskVector.load(saved[0])
    assert ltv.model == "smollm2-135m" and ltv.vectors.shape == (1, 576)
