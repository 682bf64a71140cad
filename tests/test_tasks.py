"""Tests of ltvlib.tasks: registry, prompt formats, seeded splits and data-file validation."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from ltvlib.tasks import (
    PAPER_TASKS,
    TASKS,
    DataFileError,
    Example,
    Task,
    UnknownTaskError,
    data_root,
    get_task,
    label_words,
    load_splits,
)

CLASSIFICATION = [n for n, t in TASKS.items() if t.kind == "classification"]
# Small/medium tasks keep the file fast; english_french (4.7k rows) is covered by the size test.
SPLIT_TASKS = ["capital", "antonym", "sst2", "trec", "snli", "rte", "agnews", "gender_en_fr", "myopic"]


def _inputs(exs: tuple[Example, ...]) -> set[str]:
    return {e.input for e in exs}


def test_registry_has_paper_and_extra_tasks() -> None:
    assert PAPER_TASKS == ("capital", "capitalize", "antonym", "sst2", "trec", "snli", "rte")
    extra = {"english_french", "gender_masc_fem", "gender_en_fr", "gender_composed", "myopic", "agnews"}
    assert set(PAPER_TASKS) | extra <= set(TASKS)
    for name, task in TASKS.items():
        assert get_task(name) is task and task.name == name
    assert get_task(TASKS["sst2"]) is TASKS["sst2"]


def test_unknown_task_error_names_value_and_allowed() -> None:
    with pytest.raises(UnknownTaskError) as info:
        get_task("sst3")
    msg = str(info.value)
    assert "'sst3'" in msg
    assert all(name in msg for name in TASKS)
    assert isinstance(info.value, KeyError) and isinstance(info.value, ValueError)
    with pytest.raises(ValueError, match="sst3"):
        load_splits("sst3")


def test_formatting() -> None:
    t = get_task("antonym")
    ex = Example("hot", "cold")
    assert t.format_query("hot") == "Q: hot\nA:"
    assert t.format_answer("cold") == " cold"
    assert t.format_demo(ex) == "Q: hot\nA: cold"
    assert t.format_query("{y} {x}") == "Q: {y} {x}\nA:"  # braces in data stay literal
    m = get_task("myopic")
    assert m.format_demo(Example("Pick one", "B")) == "Q: Pick one\nA: (B"


def test_label_words() -> None:
    assert label_words("sst2") == ("negative", "positive")
    assert label_words("trec") == ("abbreviation", "description", "entity", "human", "location", "number")
    assert label_words("agnews") == ("World", "Sports", "Business", "Science")
    assert label_words("snli") == ("True", "Neither", "False")
    assert label_words("rte") == ("True", "False")
    assert label_words("myopic") == ("A", "B")
    with pytest.raises(ValueError, match="generation"):
        label_words("capital")


def test_task_validation() -> None:
    with pytest.raises(ValueError, match="labels"):
        Task(name="x", kind="classification", files=("a.jsonl",))
    with pytest.raises(ValueError, match="eval_file"):
        Task(name="x", kind="generation", files=("a.jsonl",), eval_file="b.jsonl")


@pytest.mark.parametrize("name", SPLIT_TASKS)
def test_splits_disjoint_and_deterministic(name: str) -> None:
    a = load_splits(name, seed=0)
    b = load_splits(name, seed=0)
    c = load_splits(name, seed=1)
    assert a == b
    assert a.train != c.train
    tr, va, te = _inputs(a.train), _inputs(a.validation), _inputs(a.test)
    assert not tr & te and not va & te and not tr & va
    assert a.train and a.validation and a.test
    assert a.seed == 0 and a.task is TASKS[name]


@pytest.mark.parametrize("name", CLASSIFICATION)
def test_every_label_in_labels(name: str) -> None:
    s = load_splits(name)
    labels = TASKS[name].labels
    assert labels is not None
    seen = {e.output for e in s.train + s.validation + s.test}
    assert seen == set(labels)  # every output is a label and every label occurs
    assert all(not e.output.startswith(" ") for e in s.train)


def test_split_sizes() -> None:
    expected = {
        "capital": (98, 49, 50),
        "capitalize": (406, 203, 204),
        "antonym": (600, 400, 1398),
        "english_french": (600, 400, 3698),
        "sst2": (600, 400, 1821),
        "trec": (600, 400, 500),
        "snli": (600, 400, 2000),
        "rte": (600, 400, 277),
        "agnews": (38, 26, 2000),
        "gender_masc_fem": (43, 21, 22),
        "gender_en_fr": (86, 42, 44),
        "gender_composed": (43, 21, 22),
        "myopic": (500, 250, 250),
    }
    for name, sizes in expected.items():
        s = load_splits(name)
        assert (len(s.train), len(s.validation), len(s.test)) == sizes, name
    small = load_splits("sst2", n_train=8, n_val=4, n_test=10)
    assert (len(small.train), len(small.validation), len(small.test)) == (8, 4, 10)


def test_test_split_independent_of_train_size() -> None:
    # Single-file tasks cut fixed regions, so asking for fewer training items keeps the test set.
    assert load_splits("antonym", n_train=16).test == load_splits("antonym").test
    assert load_splits("antonym", n_train=16).train == load_splits("antonym").train[:16]


def test_test_comes_from_eval_file() -> None:
    rows = [json.loads(line) for line in (data_root() / "rte/dev.jsonl").read_text().splitlines()]
    assert {e.input for e in load_splits("rte").test} == {r["input"] for r in rows}


def test_env_var_overrides_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "fv").mkdir()
    items = [{"input": f"w{i}", "output": f"W{i}"} for i in range(8)]
    (tmp_path / "fv/capitalize.json").write_text(json.dumps(items, indent=2))
    monkeypatch.setenv("LTV_DATA_DIR", str(tmp_path))
    s = load_splits("capitalize")
    assert (len(s.train), len(s.validation), len(s.test)) == (4, 2, 2)


def _write_sst2(root: Path, test_text: str) -> None:
    (root / "sst2").mkdir()
    (root / "sst2/train.jsonl").write_text('{"input": "fine", "output": "positive"}\n')
    (root / "sst2/test.jsonl").write_text(test_text)


def test_malformed_jsonl_line_raises_with_line_number(tmp_path: Path) -> None:
    _write_sst2(tmp_path, '{"input": "good", "output": "positive"}\n{"input": "bad", "output": \n')
    with pytest.raises(DataFileError, match=r"test\.jsonl:2: malformed JSON"):
        load_splits("sst2", data_dir=tmp_path)


def test_missing_field_raises_with_line_number(tmp_path: Path) -> None:
    _write_sst2(tmp_path, '{"input": "a", "output": "positive"}\n\n{"input": "b", "out": "negative"}\n')
    with pytest.raises(DataFileError, match=r"test\.jsonl:3: field 'output' is missing"):
        load_splits("sst2", data_dir=tmp_path)


def test_unknown_label_raises(tmp_path: Path) -> None:
    _write_sst2(tmp_path, '{"input": "a", "output": "neutral"}\n')
    with pytest.raises(DataFileError, match=r"test\.jsonl:1: label 'neutral'"):
        load_splits("sst2", data_dir=tmp_path)


def test_empty_file_raises(tmp_path: Path) -> None:
    _write_sst2(tmp_path, "")
    with pytest.raises(DataFileError, match="empty"):
        load_splits("sst2", data_dir=tmp_path)


def test_malformed_json_list_item_raises_with_line_number(tmp_path: Path) -> None:
    (tmp_path / "fv").mkdir()
    text = '[\n  {"input": "a", "output": "A"},\n  {"input": "b"}\n]\n'
    (tmp_path / "fv/capitalize.json").write_text(text)
    with pytest.raises(DataFileError, match=r"capitalize\.json:3: field 'output' is missing"):
        load_splits("capitalize", data_dir=tmp_path)
    (tmp_path / "fv/capitalize.json").write_text("[]")
    with pytest.raises(DataFileError, match="empty"):
        load_splits("capitalize", data_dir=tmp_path)


@functools.cache
def _smollm2_tokenizer() -> Any:
    """The embedded model's tokenizer (from its dequantised cache folder, converted on first use)."""
    from ltvlib.models import load_model

    return load_model("smollm2-135m", device="cpu").tokenizer


@pytest.mark.realmodel
@pytest.mark.parametrize("name", CLASSIFICATION)
def test_label_first_tokens_distinct(name: str) -> None:
    tok = _smollm2_tokenizer()
    task = TASKS[name]
    assert task.labels is not None
    ex = load_splits(name, n_train=1, n_val=0, n_test=0).train[0]
    q = task.format_query(ex.input)
    q_ids = tok(q, add_special_tokens=False).input_ids
    firsts = []
    for lab in task.labels:
        ids = tok(q + task.format_answer(lab), add_special_tokens=False).input_ids
        assert ids[: len(q_ids)] == q_ids
        firsts.append(ids[len(q_ids)])
    assert len(set(firsts)) == len(firsts)
