"""Tests of ltvlib.cache: keys, atomic writes, JSON memoisation."""

from __future__ import annotations

import ast
import dataclasses
import json
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from ltvlib import cache, ltv
from ltvlib.ltv import FAST_RECIPE, with_config
from ltvlib.tasks import Task, data_root, get_task, load_splits


@dataclasses.dataclass
class Cfg:
    model: str
    layer: int
    lr: float = 1e-3
    tags: tuple[str, ...] = ("a", "b")


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("LTV_CACHE_DIR", str(root))
    return root


def test_cache_root_env_and_default(tmp_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cache.cache_root() == tmp_cache
    monkeypatch.delenv("LTV_CACHE_DIR")
    assert cache.cache_root() == Path.home() / ".cache" / "ltv-book"


def test_code_version_shape_and_memoised() -> None:
    v = cache.code_version()
    version, _, digest = v.partition("+")
    assert version and len(digest) == 12
    assert cache.code_version() is v  # computed once


def test_config_key_stable_across_dict_order_and_equal_objects() -> None:
    a = {"x": 1, "y": [1, 2.5, None, True], "p": Path("/a/b")}
    b = {"p": Path("/a/b"), "y": [1, 2.5, None, True], "x": 1}
    assert cache.config_key(a) == cache.config_key(b)
    assert cache.config_key(Cfg("m", 3)) == cache.config_key(Cfg("m", 3))
    assert len(cache.config_key(a)) == 64


@pytest.mark.parametrize(
    "other",
    [
        Cfg("m", 4),
        Cfg("m2", 3),
        Cfg("m", 3, lr=1e-4),
        Cfg("m", 3, tags=("a",)),
        {"model": "m", "layer": 3, "lr": 1e-3, "tags": ["a", "b"]},  # same fields, not the dataclass
    ],
)
def test_config_key_sensitive(other: object) -> None:
    assert cache.config_key(Cfg("m", 3)) != cache.config_key(other)


def test_config_key_distinguishes_types() -> None:
    keys = {cache.config_key(v) for v in (1, 1.0, True, "1", None, [1], Path("1"))}
    assert len(keys) == 7


def test_config_key_depends_on_code_version(monkeypatch: pytest.MonkeyPatch) -> None:
    before = cache.config_key({"a": 1})
    monkeypatch.setattr(cache, "code_version", lambda: "9.9+deadbeef0000")
    assert cache.config_key({"a": 1}) != before


def test_config_key_type_error_names_type() -> None:
    class Opaque:
        pass

    with pytest.raises(TypeError, match="Opaque"):
        cache.config_key({"a": [Opaque()]})
    with pytest.raises(TypeError, match="set"):
        cache.config_key({1, 2})
    with pytest.raises(TypeError, match="int"):
        cache.config_key({1: "non-str key"})


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_atomic_write_roundtrip_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "f.json"
    cache.atomic_write_json(target, {"b": 1, "a": [1, 2]})
    assert json.loads(target.read_text()) == {"a": [1, 2], "b": 1}
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600
    cache.atomic_write_text(target, "new")
    assert target.read_text() == "new"
    cache.atomic_write_bytes(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert _leftovers(target.parent) == []


def test_atomic_write_failure_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f.txt"
    target.write_text("old")

    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        cache.atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_atomic_write_failure_mid_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f.bin"
    target.write_bytes(b"old")
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        cache.atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


def test_atomic_write_json_unserialisable_touches_nothing(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    target.write_text("{}")
    with pytest.raises(TypeError):
        cache.atomic_write_json(target, {"x": object()})
    assert target.read_text() == "{}"
    assert _leftovers(tmp_path) == []


def test_cached_json_computes_once(tmp_cache: Path) -> None:
    calls = []

    def compute() -> dict:
        calls.append(1)
        return {"acc": 0.5, "per_layer": (1, 2)}

    cfg = Cfg("m", 3)
    first = cache.cached_json("icl", cfg, compute)
    second = cache.cached_json("icl", cfg, compute)
    assert first == second == {"acc": 0.5, "per_layer": [1, 2]}
    assert len(calls) == 1

    files = list((tmp_cache / "results" / "icl").glob("*.json"))
    assert [f.stem for f in files] == [cache.config_key(cfg)]
    record = json.loads(files[0].read_text())
    assert record["config"]["model"] == "m" and record["code_version"] == cache.code_version()

    cache.cached_json("icl", Cfg("m", 4), compute)
    assert len(calls) == 2


def test_cached_json_keeps_key_order_on_miss_and_hit(tmp_cache: Path) -> None:
    # a table built from a result lists rows in its key order: a cold run (miss) and a warm run (hit) must agree
    def compute() -> dict:
        return {"zeta": {"b": 1, "a": 2}, "alpha": 0, "mid": [{"y": 1, "x": 2}]}

    first = cache.cached_json("order", {"k": 1}, compute)
    second = cache.cached_json("order", {"k": 1}, compute)
    for value in (first, second):
        assert list(value) == ["zeta", "alpha", "mid"]
        assert list(value["zeta"]) == ["b", "a"] and list(value["mid"][0]) == ["y", "x"]


def test_cached_json_recomputes_corrupt_file(tmp_cache: Path) -> None:
    path = cache.cache_path("x", {"a": 1}, ".json", area="results")
    path.parent.mkdir(parents=True)
    path.write_text("{truncated")
    assert cache.cached_json("x", {"a": 1}, lambda: {"v": 1}) == {"v": 1}
    assert json.loads(path.read_text())["value"] == {"v": 1}


def test_cached_json_rejects_non_dict() -> None:
    with pytest.raises(TypeError, match="dict"):
        cache.cached_json("x", {}, lambda: [1])  # type: ignore[arg-type,return-value]


def test_cache_path(tmp_cache: Path) -> None:
    p = cache.cache_path("ltv/gsm", {"a": 1}, "safetensors")
    assert p.parent == tmp_cache / "vectors" / "ltv" / "gsm"
    assert not tmp_cache.exists()  # a path is only a name: folders appear when an entry is written
    assert p.name == cache.config_key({"a": 1}) + ".safetensors"
    cache.atomic_write_bytes(p, b"x")
    assert p.read_bytes() == b"x"
    for bad in ("../x", "/abs", "a/../b", ""):
        with pytest.raises(ValueError):
            cache.cache_path(bad, {}, ".x")
    with pytest.raises(ValueError):
        cache.cache_path("k", {}, ".x", area="elsewhere")


# ---------------------------------------------------------------------------------- task data in the keys

TINY = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=8)
ANTONYM = "fv/antonym.json"


def _data_copy(tmp_path: Path) -> Path:
    """A data folder holding a copy of the antonym file only."""
    root = tmp_path / "data"
    (root / "fv").mkdir(parents=True)
    shutil.copyfile(data_root() / ANTONYM, root / ANTONYM)
    return root


def _edit_first_answer(path: Path, answer: str) -> None:
    rows = json.loads(path.read_text(encoding="utf-8"))
    rows[0]["output"] = answer
    path.write_text(json.dumps(rows, indent=4), encoding="utf-8")


@pytest.fixture
def training_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts the vectors train_ltv(cache=True) trains, by their task's name: each one trained is stored once,
    a cache hit stores none."""
    calls: list[str] = []
    real = ltv.LearnedTaskVector.save

    def counting(self, path):
        calls.append(self.task)
        return real(self, path)

    monkeypatch.setattr(ltv.LearnedTaskVector, "save", counting)
    return calls


def _cached(lm, task="antonym"):
    return ltv.train_ltv(lm, task, layers=[1], recipe=TINY, n_train=16, n_val=8, cache=True, progress=False)


def test_task_fingerprint_follows_definition_and_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _data_copy(tmp_path)
    original = cache.task_fingerprint("antonym")  # the repository's data folder
    assert cache.task_fingerprint("antonym", root) == original  # equal bytes elsewhere: the same fingerprint
    monkeypatch.setenv("LTV_DATA_DIR", str(root))
    assert cache.task_key("antonym") == {"name": "antonym", "data": original}

    before = (root / ANTONYM).read_bytes()
    _edit_first_answer(root / ANTONYM, "unperfectly")  # edited in place, within this process
    edited = cache.task_fingerprint("antonym")
    assert edited != original
    (root / ANTONYM).write_bytes(before)
    assert cache.task_fingerprint("antonym") == original  # keyed by content, not by file time

    registered = get_task("antonym")
    other_template = Task(name="antonym", kind="generation", query_template="In: {x}\nOut:", files=(ANTONYM,))
    assert cache.task_fingerprint(other_template) != original
    elsewhere = tmp_path / "mine.json"
    shutil.copyfile(root / ANTONYM, elsewhere)
    _edit_first_answer(elsewhere, "unperfectly")
    same_name = Task(name="antonym", kind="generation", files=(str(elsewhere),))  # an absolute path
    assert cache.task_fingerprint(same_name) not in (original, edited, cache.task_fingerprint(registered))

    (root / ANTONYM).unlink()
    with pytest.raises(FileNotFoundError, match="antonym"):
        cache.task_fingerprint("antonym")


def test_cached_ltv_misses_when_the_task_data_change(llama, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      tmp_cache: Path, training_calls: list[str]) -> None:
    root = _data_copy(tmp_path)
    monkeypatch.setenv("LTV_DATA_DIR", str(root))
    first = _cached(llama)
    again = _cached(llama)
    assert training_calls == ["antonym"]  # unchanged data: a hit
    assert torch.equal(first.vectors, again.vectors)

    before = (root / ANTONYM).read_bytes()
    _edit_first_answer(root / ANTONYM, "unperfectly")
    s = load_splits("antonym", n_train=10**6, n_val=10**6)
    assert "unperfectly" in {e.output for e in (*s.train, *s.validation, *s.test)}  # the splits see the edit
    _cached(llama)
    assert training_calls == ["antonym", "antonym"]  # the edited file: a miss, trained afresh
    assert len(list((tmp_cache / "vectors" / "ltv").glob("*.safetensors"))) == 2

    # another task under the registered name, with other data: its own entry, never the cached vector
    other = tmp_path / "other.json"
    other.write_bytes((root / ANTONYM).read_bytes())
    _cached(llama, Task(name="antonym", kind="generation", files=(str(other),)))
    assert len(training_calls) == 3

    (root / ANTONYM).write_bytes(before)  # the original bytes again: the first entry is found
    assert torch.equal(_cached(llama).vectors, first.vectors)
    assert len(training_calls) == 3


def test_cached_ltv_bad_position_writes_nothing(llama, tmp_cache: Path) -> None:
    with pytest.raises(ValueError, match="position 500"):
        _cached_at(llama, [500])
    with pytest.raises(ValueError, match="positions must be a non-empty sequence of ints"):
        _cached_at(llama, [])
    assert not (tmp_cache / "vectors").exists()


def _cached_at(lm, positions):
    return ltv.train_ltv(lm, "antonym", layers=[1], positions=positions, recipe=TINY, n_train=16, n_val=8,
                         cache=True, progress=False)


# ---------------------------------------------------------------------------------- code in the keys


@pytest.fixture
def parse_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``cache._imported`` (one file's ltvlib imports, read from its syntax tree) memoised on the package folder,
    the file and its bytes: each version of a file is parsed once, an edited file is parsed again. The closures
    and hashes are the library's own; only the repeated parsing of unchanged files, most of these tests' time
    when every module's closure is taken, is skipped."""
    real, memo = cache._imported, {}

    def imported(path: Path) -> set[Path]:
        key = (cache._PKG_DIR, path, path.read_bytes())
        if key not in memo:
            memo[key] = frozenset(real(path))
        return set(memo[key])

    monkeypatch.setattr(cache, "_imported", imported)


@pytest.fixture
def package_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of the ltvlib sources that the key functions hash instead of the real package (the code that
    runs stays the real one); the memoised hashes are cleared before and after."""
    copy = tmp_path / "ltvlib"
    shutil.copytree(cache._PKG_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    memos = (cache.source_hash, cache.dependency_hash, cache.code_version)
    for memo in memos:
        memo.cache_clear()
    monkeypatch.setattr(cache, "_PKG_DIR", copy)
    yield copy
    for memo in memos:
        memo.cache_clear()


def _clear_memos() -> None:
    for memo in (cache.source_hash, cache.dependency_hash, cache.code_version):
        memo.cache_clear()  # a new process would start with empty memos


def _touch_source(package: Path, module: str) -> None:
    """A change to what ``module`` does (a new module-level name)."""
    with (package / module).open("a", encoding="utf-8") as fh:
        fh.write("\n_EDITED = 1\n")
    _clear_memos()


def _reword_source(package: Path, module: str) -> None:
    """An edit of prose and layout only: every docstring reworded, a comment added, a blank line removed."""
    path = package / module
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    docstrings = [node.body[0] for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str)]
    assert docstrings, module
    for doc in sorted(docstrings, key=lambda d: d.lineno, reverse=True):  # bottom up: earlier lines keep their places
        indent = lines[doc.lineno - 1][: doc.col_offset]
        lines[doc.lineno - 1 : doc.end_lineno] = [f'{indent}"""Reworded prose."""  # and a comment\n']
    text = "".join(lines).replace("\n\n\n", "\n\n", 1)
    path.write_text("# a new first comment\n" + text, encoding="utf-8")
    _clear_memos()


def test_analysis_edit_keeps_ltv_cache_and_trainer_edit_invalidates_it(
    llama, package_copy: Path, tmp_cache: Path, training_calls: list[str], parse_once: None
) -> None:
    first = _cached(llama)
    assert training_calls == ["antonym"]
    ov_before = cache.dependency_hash("ltvlib.analysis.ov")
    key_heads_before = cache.dependency_hash("ltvlib.analysis.key_heads")

    # analysis and chapter-level modules: the trained vector stays valid
    for module in ("analysis/ov.py", "analysis/linearity.py", "study/ltvs.py", "book/runner.py"):
        _touch_source(package_copy, module)
        assert torch.equal(_cached(llama).vectors, first.vectors)
    assert training_calls == ["antonym"]
    assert cache.dependency_hash("ltvlib.analysis.ov") != ov_before  # the analysis's own results do move
    assert cache.dependency_hash("ltvlib.analysis.key_heads") == key_heads_before  # key_heads does not import ov

    # the trainer, and a module the trainer imports: trained afresh
    _touch_source(package_copy, "ltv.py")
    _cached(llama)
    assert training_calls == ["antonym", "antonym"]
    _touch_source(package_copy, "forward.py")
    _cached(llama)
    assert len(training_calls) == 3
    _touch_source(package_copy, "analysis/key_heads.py")
    assert cache.dependency_hash("ltvlib.analysis.ov") != ov_before  # ov imports key_heads


def test_import_closure_follows_every_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "ltvlib"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from .cache import cache_root\n\ndef f():\n    from .b import g  # imported inside a function\n",
        "b.py": "from .sub import c\nimport ltvlib.d\n",
        "sub/__init__.py": "",
        "sub/c.py": "from ..e import h\n",
        "cache.py": "from .unused import x\n",
        "d.py": "", "e.py": "", "unused.py": "", "alone.py": "",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    monkeypatch.setattr(cache, "_PKG_DIR", pkg)
    assert cache.import_closure("ltvlib.a") == (
        "__init__.py", "a.py", "b.py", "d.py", "e.py", "sub/__init__.py", "sub/c.py",
    )  # not cache.py (the key machinery) nor what only it imports
    script = tmp_path / "chapter.py"
    script.write_text("from ltvlib.sub.c import h\n")
    assert cache.import_closure(scripts=(script,)) == ("__init__.py", "e.py", "sub/__init__.py", "sub/c.py")
    with pytest.raises(ValueError, match="ltvlib.nothing"):
        cache.import_closure("ltvlib.nothing")


def test_core_closure_is_the_trainer_evaluator_and_loader() -> None:
    core = set(cache.import_closure(*cache.CORE_MODULES))
    assert {"ltv.py", "evaluate.py", "models.py", "forward.py", "kv_cache.py", "prompts.py", "tasks.py", "inject.py"} <= core
    assert not core & {"analysis/ov.py", "analysis/key_heads.py", "analysis/linearity.py", "study/ltvs.py",
                       "book/runner.py", "cache.py"}
    assert not {p for p in core if p.split("/")[0] in ("analysis", "study", "book")}


def test_a_chapter_stamp_follows_the_modules_the_chapter_imports(package_copy: Path, tmp_path: Path) -> None:
    chapter = tmp_path / "01_chapter.py"
    chapter.write_text("from ltvlib.stats import Proportion\nimport ltvlib.tasks\n")
    before = cache.script_dependency_hash(chapter)
    # tasks.py imports answer_tokens.py (label tokens are checked with the answer tokeniser) and paths.py (the
    # cache root)
    assert set(cache.import_closure(scripts=(chapter,))) == {
        "__init__.py", "stats.py", "tasks.py", "answer_tokens.py", "paths.py"}
    _touch_source(package_copy, "analysis/ov.py")  # not imported by the chapter
    assert cache.script_dependency_hash(chapter) == before
    _touch_source(package_copy, "stats.py")
    assert cache.script_dependency_hash(chapter) != before


def test_editing_analysis_study_or_book_keeps_the_trainer_key(package_copy: Path, parse_once: None) -> None:
    """The point of the folders: the trainer's key (:func:`code_version`, ``dependency_hash("ltvlib.ltv")``) is
    the core's source only, so an edit to any file under ``analysis/``, ``study/`` or ``book/`` leaves every
    trained vector valid, while an edit to the trainer invalidates them; a study's own results follow the
    analysis module and the package ``__init__`` files they import."""
    version, trainer = cache.code_version(), cache.dependency_hash("ltvlib.ltv")
    layered = sorted(p.relative_to(package_copy).as_posix()
                     for folder in ("analysis", "study", "book") for p in (package_copy / folder).rglob("*.py"))
    assert {"analysis/__init__.py", "analysis/ov.py", "study/__init__.py", "study/ltvs.py", "study/ov.py",
            "book/__init__.py", "book/runner.py"} <= set(layered)
    assert {"analysis/__init__.py", "analysis/ov.py", "study/__init__.py", "study/ov.py",
            "study/key_heads.py"} <= set(cache.import_closure("ltvlib.study.ov"))
    for module in layered:
        _touch_source(package_copy, module)
        assert cache.code_version() == version, module
        assert cache.dependency_hash("ltvlib.ltv") == trainer, module

    study_ov = cache.dependency_hash("ltvlib.study.ov")
    _touch_source(package_copy, "analysis/ov.py")
    after_analysis = cache.dependency_hash("ltvlib.study.ov")
    assert after_analysis != study_ov
    _touch_source(package_copy, "study/__init__.py")
    assert cache.dependency_hash("ltvlib.study.ov") != after_analysis

    _touch_source(package_copy, "ltv.py")
    assert cache.code_version() != version
    assert cache.dependency_hash("ltvlib.ltv") != trainer


def test_layers_import_one_way(parse_once: None) -> None:
    """core (top level, baselines/) imports none of analysis/, study/, book/; analysis/ imports no study/ or book/;
    study/ no book/: what each layer's results depend on stays below it."""
    allowed = {"core": {"baselines"}, "analysis": {"baselines", "analysis"},
               "study": {"baselines", "analysis", "study"}, "book": {"baselines", "book"}}
    seen = set()
    for path in sorted(cache._PKG_DIR.rglob("*.py")):
        rel = path.relative_to(cache._PKG_DIR)
        if "__pycache__" in rel.parts or rel.name == "__main__.py":
            continue
        folder = rel.parts[0] if len(rel.parts) > 1 else "core"
        layer = "core" if folder == "baselines" else folder
        seen.add(layer)
        module = ".".join(("ltvlib", *rel.with_suffix("").parts)).removesuffix(".__init__")
        folders = {p.split("/")[0] for p in cache.import_closure(module) if "/" in p}
        assert folders <= allowed[layer], (module, sorted(folders - allowed[layer]))
    assert seen == set(allowed)


# ---------------------------------------------------------------------------------- keys follow meaning, not bytes

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PARAMS = {"model": "smollm2-135m", "profile": "cpu", "seed": 0, "device": "auto"}


def _chapter_stamps() -> dict[str, dict]:
    from ltvlib.book import runner

    return {c.name: runner.make_stamp(c, DEFAULT_PARAMS) for c in runner.read_chapters(ROOT) if c.py.exists()}


def test_normalised_source_ignores_prose_and_layout() -> None:
    plain = "def f(x):\n    return x + 1\n"
    prose = '"""Module."""\n\n# a comment\ndef f(x):  # why\n    """What f does."""\n\n    return (x +\n            1)\n'
    assert cache.normalised_source(plain) == cache.normalised_source(prose)
    assert cache.normalised_source(plain) != cache.normalised_source(plain.replace("+ 1", "+ 2"))
    assert cache.normalised_source("X = 1\n") != cache.normalised_source("X = '1'\n")  # a string value is code


def test_prose_edit_keeps_code_version_and_chapter_stamps(package_copy: Path, parse_once: None) -> None:
    version, trainer = cache.code_version(), cache.dependency_hash("ltvlib.ltv")
    stamps = _chapter_stamps()
    _reword_source(package_copy, "ltv.py")
    assert cache.code_version() == version
    assert cache.dependency_hash("ltvlib.ltv") == trainer
    assert _chapter_stamps() == stamps

    _touch_source(package_copy, "ltv.py")  # a change to the trainer's code
    assert cache.code_version() != version
    changed = _chapter_stamps()
    assert {name for name in stamps if changed[name] != stamps[name]} == {
        name for name in stamps if "ltv.py" in cache.import_closure(scripts=(ROOT / "chapters" / f"{name}.py",))
    }


def test_trainer_code_change_changes_the_ltv_key(package_copy: Path, parse_once: None) -> None:
    key = {"model": "m", "task": "antonym", "layers": [1]}
    before = cache.cache_path("ltv", key, ".safetensors")
    _reword_source(package_copy, "ltv.py")
    assert cache.cache_path("ltv", key, ".safetensors") == before
    _touch_source(package_copy, "ltv.py")
    assert cache.cache_path("ltv", key, ".safetensors") != before


def test_a_study_edit_restamps_only_the_chapters_that_import_it(package_copy: Path, parse_once: None) -> None:
    stamps = _chapter_stamps()
    closures = {name: set(cache.import_closure(scripts=(ROOT / "chapters" / f"{name}.py",))) for name in stamps}
    for module in ("study/myopic.py", "study/composition.py", "study/across_models.py", "study/flexibility.py"):
        _touch_source(package_copy, module)
        changed = _chapter_stamps()
        restamped = {name for name in stamps if changed[name] != stamps[name]}
        assert restamped == {name for name, closure in closures.items() if module in closure}, module
        stamps = changed
    # each of these studies is imported by its own chapter only (the plans take their sizes from a leaf module)
    owners = {module: {n for n, c in closures.items() if module in c}
              for module in ("study/myopic.py", "study/composition.py", "study/across_models.py", "study/flexibility.py",
                             "analysis/peft_compare.py")}
    assert owners == {"study/myopic.py": {"07_myopic"}, "study/composition.py": {"06_generalization_composition"},
                      "study/across_models.py": {"08_across_models"}, "study/flexibility.py": {"02_flexibility"},
                      "analysis/peft_compare.py": {"03_peft"}}



def test_a_grid_label_edit_restamps_only_the_chapters_that_show_the_grid(package_copy: Path, parse_once: None) -> None:
    stamps = _chapter_stamps()
    _touch_source(package_copy, "book/verdict_grid.py")
    changed = _chapter_stamps()
    restamped = {name for name in stamps if changed[name] != stamps[name]}
    # the scorecard page renders the grid; chapter 02 names its claims with the grid's labels
    assert restamped == {"scorecard", "02_flexibility"}


# ---------------------------------------------------------------------------------- damaged entries


def _save_tensors(value: dict[str, torch.Tensor], path: Path) -> None:
    from safetensors.torch import save

    cache.atomic_write_bytes(path, save(value))


def _load_tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


def _damage_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "damaged entry" in r.getMessage()]


def test_a_truncated_vector_is_reported_and_recomputed(tmp_cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    calls = []

    def compute() -> dict[str, torch.Tensor]:
        calls.append(1)
        return {"vectors": torch.arange(4000, dtype=torch.float32).reshape(2, 2000)}

    path = cache.cache_path("ltv", {"a": 1}, ".safetensors")
    first = cache.cached_file(path, compute, load=_load_tensors, save=_save_tensors)
    assert torch.equal(cache.cached_file(path, compute, load=_load_tensors, save=_save_tensors)["vectors"],
                       first["vectors"])
    assert len(calls) == 1 and not _damage_lines(caplog)

    whole = path.read_bytes()
    path.write_bytes(whole[:2000])  # cut in transit
    with caplog.at_level(logging.WARNING, logger="ltvlib.cache"):
        again = cache.cached_file(path, compute, load=_load_tensors, save=_save_tensors)
    assert len(calls) == 2 and torch.equal(again["vectors"], first["vectors"])
    [line] = _damage_lines(caplog)
    assert "\n" not in line and str(path) in line and "truncated safetensors" in line and "recomputing" in line
    assert path.read_bytes() == whole  # rewritten whole
    assert _leftovers(path.parent) == []

    caplog.clear()
    path.write_bytes(b"not a safetensors file at all")
    with caplog.at_level(logging.WARNING, logger="ltvlib.cache"):
        assert cache.read_cached(path, _load_tensors) is None
    [line] = _damage_lines(caplog)
    assert str(path) in line and "safetensors" in line
    assert cache.read_cached(path.with_name("missing.safetensors"), _load_tensors) is None  # missing: no report
    assert len(_damage_lines(caplog)) == 1


def test_check_safetensors_names_the_damage(tmp_path: Path) -> None:
    path = tmp_path / "v.safetensors"
    _save_tensors({"v": torch.ones(100)}, path)
    cache.check_safetensors(path)
    whole = path.read_bytes()
    for cut, match in ((4, "8-byte header length"), (20, "the header alone needs"), (len(whole) - 1, "header describes")):
        path.write_bytes(whole[:cut])
        with pytest.raises(cache.DamagedEntryError, match=match):
            cache.check_safetensors(path)
    path.write_bytes(whole + b"xx")
    with pytest.raises(cache.DamagedEntryError, match="stray bytes"):
        cache.check_safetensors(path)


def test_a_loader_bug_is_not_taken_for_damage(tmp_path: Path) -> None:
    path = tmp_path / "v.safetensors"
    _save_tensors({"v": torch.ones(3)}, path)

    def broken(p: Path) -> None:
        raise AttributeError("a bug in the loader")

    with pytest.raises(AttributeError, match="bug"):
        cache.read_cached(path, broken)


@pytest.mark.parametrize("damage", ["{truncated", '{"kind": "x", "config": {}}', "[1, 2]", "\udcff"])
def test_a_damaged_result_is_reported_and_recomputed(tmp_cache: Path, caplog: pytest.LogCaptureFixture,
                                                      damage: str) -> None:
    calls = []

    def compute() -> dict:
        calls.append(1)
        return {"v": 1}

    assert cache.cached_json("x", {"a": 1}, compute) == {"v": 1}
    path = cache.cache_path("x", {"a": 1}, ".json", area="results")
    path.write_bytes(damage.encode("utf-8", "surrogateescape"))
    with caplog.at_level(logging.WARNING, logger="ltvlib.cache"):
        assert cache.cached_json("x", {"a": 1}, compute) == {"v": 1}
    assert len(calls) == 2
    [line] = _damage_lines(caplog)
    assert "\n" not in line and str(path) in line and "recomputing" in line
    assert json.loads(path.read_text())["value"] == {"v": 1}
    assert cache.cached_json("x", {"a": 1}, compute) == {"v": 1} and len(calls) == 2  # whole again: a hit
