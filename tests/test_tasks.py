"""Tests of ltvlib.tasks: registry, prompt formats, seeded splits and data-file validation."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from ltvlib.tasks import (
    PAPER_TASKS,
    TASKS,
    DataFileError,
    Example,
    MissingDataFileError,
    Task,
    UnknownTaskError,
    check_label_tokens,
    data_root,
    get_task,
    label_words,
    load_splits,
)
from tests.models_fixtures import tiny_tokenizer

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
        s = load_splits(name, balance=False)
        assert (len(s.train), len(s.validation), len(s.test)) == sizes, name
    # label-balanced pools (the default for classification): TREC's rarest label has 34 pool rows, split
    # 20 / 14 in the ratio 600 : 400; SNLI's 400 validation items are 3 x 133; AG News' rarest has 13
    balanced = {"sst2": (600, 400), "trec": (120, 84), "snli": (600, 399), "rte": (600, 400), "agnews": (32, 20)}
    for name, (n_train, n_val) in balanced.items():
        s = load_splits(name)
        assert (len(s.train), len(s.validation), len(s.test)) == (n_train, n_val, expected[name][2]), name
    small = load_splits("sst2", n_train=8, n_val=4, n_test=10)
    assert (len(small.train), len(small.validation), len(small.test)) == (8, 4, 10)


@pytest.mark.parametrize("name", CLASSIFICATION)
def test_balanced_pools_keep_the_test_split(name: str) -> None:
    balanced, plain = load_splits(name), load_splits(name, balance=False)
    assert balanced.test == plain.test
    labels = TASKS[name].labels
    assert labels is not None
    for split in (balanced.train, balanced.validation):
        counts = [sum(e.output == label for e in split) for label in labels]
        assert len(set(counts)) == 1 and counts[0] > 0, (name, counts)
        # in turns, one of each label: every prefix of a multiple of the label count is balanced too
        for start in range(0, len(split), len(labels)):
            assert sorted(e.output for e in split[start : start + len(labels)]) == sorted(labels)
    assert load_splits(name, seed=1).test == load_splits(name, seed=1, balance=False).test
    assert load_splits(name) == balanced  # deterministic


def test_generation_tasks_are_never_balanced() -> None:
    assert load_splits("antonym") == load_splits("antonym", balance=False)
    assert load_splits("gender_en_fr", n_train=10) == load_splits("gender_en_fr", n_train=10, balance=False)
    with pytest.raises(ValueError, match="'antonym' cannot balance.*generation task has no labels"):
        load_splits("antonym", balance=True)


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
    ex = load_splits(name, n_train=1, n_val=0, n_test=0, balance=False).train[0]
    q = task.format_query(ex.input)
    q_ids = tok(q, add_special_tokens=False).input_ids
    firsts = []
    for lab in task.labels:
        ids = tok(q + task.format_answer(lab), add_special_tokens=False).input_ids
        assert ids[: len(q_ids)] == q_ids
        firsts.append(ids[len(q_ids)])
    assert len(set(firsts)) == len(firsts)
    # the library's check agrees (it tokenises the answers alone, as evaluation does)
    assert len(set(check_label_tokens(task, tok).values())) == len(task.labels)


# ---------------------------------------------------------------------------------------
# Tasks from a file of one's own
# ---------------------------------------------------------------------------------------


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _word_rows(n: int) -> list[dict[str, str]]:
    return [{"input": f"word{i}", "output": f"WORD{i}"} for i in range(n)]


def test_task_from_jsonl_works_like_a_registered_task(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "upper.jsonl", _word_rows(40))
    task = Task.from_jsonl(path)
    assert task.name == "upper" and task.kind == "generation" and task.labels is None
    assert task.files == (str(path),) and Path(task.files[0]).is_absolute()
    assert task.format_demo(Example("a", "A")) == "Q: a\nA: A"
    s = load_splits(task)
    assert (len(s.train), len(s.validation), len(s.test)) == (20, 10, 10)  # 50 / 25 / 25 % under 1,400 rows
    assert not _inputs(s.train) & _inputs(s.test) and not _inputs(s.validation) & _inputs(s.test)
    assert load_splits(task) == s and load_splits(task, seed=1).train != s.train
    # an absolute path is read as is, whatever the data folder
    assert load_splits(task, data_dir=tmp_path / "elsewhere") == s
    # other fields are ignored; the templates can be changed
    custom = Task.from_jsonl(
        _jsonl(tmp_path / "more.jsonl", [{"input": "a", "output": "A", "id": 3}] * 1 + _word_rows(3)),
        name="mine", query_template="In: {x}\nOut:", description="mine",
    )
    assert custom.name == "mine" and custom.format_query("a") == "In: a\nOut:"
    assert load_splits(custom).task is custom


def test_task_from_json_list(tmp_path: Path) -> None:
    path = tmp_path / "fv_style.json"
    path.write_text(json.dumps(_word_rows(12), indent=2))
    s = load_splits(Task.from_json(path))
    assert (len(s.train), len(s.validation), len(s.test)) == (6, 3, 3)
    with pytest.raises(DataFileError, match=r"fv_style\.json: Task\.from_jsonl reads JSONL.*use Task\.from_json"):
        Task.from_jsonl(path)
    with pytest.raises(DataFileError, match=r"x\.jsonl: Task\.from_json reads a JSON list"):
        Task.from_json(_jsonl(tmp_path / "x.jsonl", _word_rows(2)))
    bad = tmp_path / "bad.json"
    bad.write_text('[\n  {"input": "a", "output": "A"},\n  {"input": "b", "output": ""}\n]\n')
    with pytest.raises(DataFileError, match=r"bad\.json:3: field 'output' is not a non-empty string \(''\)"):
        Task.from_json(bad)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", r":1: file is empty; expected JSON rows with fields \['input', 'output'\]"),
        (b'{"input": "a", "output": "A"}\n{"input": "b", "output": \n', r":2: malformed JSON .*fields \['input'"),
        (b'{"input": "a", "output": "A"}\n\n{"input": "b"}\n', r":3: field 'output' is missing"),
        (b'{"input": 7, "output": "A"}\n', r":1: field 'input' is not a non-empty string \(7\)"),
        (b'{"input": "a", "output": ""}\n', r":1: field 'output' is not a non-empty string \(''\)"),
        (b'{"input": "a", "output": "  "}\n', r":1: field 'output' is not a non-empty string"),
        (b'{"input": "a", "output": " A"}\n', r":1: output ' A' has leading or trailing whitespace"),
        (b'["a", "A"]\n', r":1: expected a JSON object with fields \['input', 'output'\], got list"),
        (b"\xff\xfe\n", r": not UTF-8 text"),
    ],
)
def test_task_file_errors_name_file_line_and_expectation(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_bytes(content)
    with pytest.raises(DataFileError) as info:
        Task.from_jsonl(path)
    assert re.search(re.escape(str(path)) + match, str(info.value)), str(info.value)


def test_task_file_missing_or_misnamed(tmp_path: Path) -> None:
    with pytest.raises(MissingDataFileError, match=r"nothing\.jsonl: file not found; expected one JSON object"):
        Task.from_jsonl(tmp_path / "nothing.jsonl")
    assert issubclass(MissingDataFileError, FileNotFoundError) and issubclass(MissingDataFileError, DataFileError)
    path = _jsonl(tmp_path / "antonym.jsonl", _word_rows(4))
    with pytest.raises(ValueError, match="'antonym' is a registered task's"):
        Task.from_jsonl(path)
    with pytest.raises(ValueError, match="kind must be"):
        Task.from_jsonl(path, name="x", kind="regression")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="query_template needs"):
        Task.from_jsonl(path, name="x", query_template="Q:")
    task = Task.from_jsonl(path, name="x")
    path.unlink()
    with pytest.raises(FileNotFoundError, match="antonym.jsonl for task 'x' not found$"):
        load_splits(task)


def test_classification_task_from_file(tmp_path: Path) -> None:
    rows = [{"input": f"text{i}", "output": ("yes", "no", "maybe")[i % 3]} for i in range(30)]
    task = Task.from_jsonl(_jsonl(tmp_path / "answers.jsonl", rows), kind="classification")
    assert task.labels == ("maybe", "no", "yes")  # sorted distinct outputs
    one = _jsonl(tmp_path / "one.jsonl", [{"input": "a", "output": "yes"}, {"input": "b", "output": "yes"}])
    with pytest.raises(DataFileError, match=r"one\.jsonl:1: a classification task needs at least two distinct"):
        Task.from_jsonl(one, kind="classification")
    # a label added to the file later is caught by load_splits, with its line
    _jsonl(tmp_path / "answers.jsonl", [*rows, {"input": "late", "output": "never"}])
    with pytest.raises(DataFileError, match=r"answers\.jsonl:31: label 'never' is not one of"):
        load_splits(task)


def test_label_tokens_must_start_differently(tmp_path: Path) -> None:
    tok = tiny_tokenizer(add_bos=False)
    assert check_label_tokens("sst2", tok) == {
        "negative": tok.convert_tokens_to_ids("negative"), "positive": tok.convert_tokens_to_ids("positive")
    }
    rows = [{"input": f"w{i}", "output": ("not good", "not bad")[i % 2]} for i in range(8)]
    task = Task.from_jsonl(_jsonl(tmp_path / "nots.jsonl", rows), kind="classification")
    with pytest.raises(ValueError, match=r"labels 'not bad' and 'not good' both start with the token 'not'"):
        check_label_tokens(task, tok)
    with pytest.raises(ValueError, match="generation task"):
        check_label_tokens("antonym", tok)


def test_skewed_file_gets_balanced_pools_and_the_same_test_split(tmp_path: Path) -> None:
    # 80 % positive: a skewed sentiment file, as a user's own reviews may be
    rows = [{"input": f"review number {i}", "output": "positive" if i % 5 else "negative"} for i in range(400)]
    task = Task.from_jsonl(_jsonl(tmp_path / "skewed.jsonl", rows), kind="classification")
    plain, balanced = load_splits(task, balance=False), load_splits(task)
    assert balanced == load_splits(task, balance=True)  # the default balances a classification task
    assert balanced.test == plain.test
    for b, p in ((balanced.train, plain.train), (balanced.validation, plain.validation)):
        rare = sum(e.output == "negative" for e in p)
        assert 0 < rare < len(p) / 3  # the unbalanced pool is skewed ...
        # ... the balanced one holds every negative of its region and as many positives, in turns
        assert len(b) == 2 * rare and all({b[i].output, b[i + 1].output} == {"negative", "positive"}
                                          for i in range(0, len(b), 2))
        assert set(b) <= set(p)
    assert not _inputs(balanced.train) & _inputs(balanced.validation)
    # n_train / n_val cap the balanced pools (per label: n // 2)
    small = load_splits(task, n_train=10, n_val=7)
    assert (len(small.train), len(small.validation)) == (10, 6) and small.test == plain.test
    assert load_splits(task, seed=2).test == load_splits(task, seed=2, balance=False).test


def test_label_missing_from_a_region_stops_balancing(tmp_path: Path) -> None:
    rows = [{"input": f"r{i}", "output": "common"} for i in range(40)] + [{"input": "r40", "output": "rare"}]
    task = Task.from_jsonl(_jsonl(tmp_path / "rare.jsonl", rows), kind="classification")
    with pytest.raises(ValueError, match=r"label\(s\) \['rare'\] have no example in the .* balance=False"):
        load_splits(task)
    assert load_splits(task, balance=False).train
