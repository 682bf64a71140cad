"""Task definitions, prompt formats and seeded data splits for the LTV reproduction.

Every task maps a text ``input`` to a verbalised ``output``. Generation tasks (country
capitals, antonyms, ...) are scored on the generated word; classification tasks (SST-2,
TREC, SNLI, RTE, AG News, myopic reward) are scored on the first token of each label
word, so each task's ``labels`` must start with distinct tokens after ``format_query``.

All data are read from the project's own ``data/`` folder (see ``data/README.md``); the
folder can be moved with the ``LTV_DATA_DIR`` environment variable or the ``data_dir``
argument of :func:`load_splits`. A task of one's own is read from any file with
:meth:`Task.from_jsonl` (one ``{"input": ..., "output": ...}`` object per line) or
:meth:`Task.from_json` (a Function-Vector-style JSON list of such objects); its ``files``
entry is the file's absolute path, which is used as is instead of being looked up in the
data folder.

For classification tasks :func:`load_splits` balances the training and validation pools
across labels by default (``balance=None``); the test split never depends on it.
"""

from __future__ import annotations

import json
import os
import random
import string
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from .answer_tokens import answer_ids

__all__ = [
    "PAPER_TASKS",
    "TASKS",
    "DataFileError",
    "Example",
    "MissingDataFileError",
    "RowSpec",
    "Task",
    "TaskSplits",
    "UnknownTaskError",
    "check_label_tokens",
    "data_root",
    "get_task",
    "label_words",
    "load_splits",
]

TaskKind = Literal["generation", "classification"]

#: Environment variable that relocates the data folder (e.g. on a machine without the repo).
DATA_DIR_ENV = "LTV_DATA_DIR"

# Sizes of the train/validation cut for single-file tasks. The split boundaries are fixed by
# these constants (not by the sizes a caller asks for) so that the test split of a task and
# seed never changes when an experiment trains on fewer examples.
_CUT_TRAIN = 600
_CUT_VAL = 400

#: The paper's prompt format: ``Q: {x}\nA: {y}``, demonstrations separated by a blank line.
DEFAULT_QUERY = "Q: {x}\nA:"
DEFAULT_ANSWER = " {y}"
DEFAULT_SEPARATOR = "\n\n"


class DataFileError(ValueError):
    """A data file is empty or has a malformed line / item.

    The message names the file, the 1-based line number and what was expected.
    """


class MissingDataFileError(DataFileError, FileNotFoundError):
    """A data file does not exist (both a :class:`DataFileError` and a ``FileNotFoundError``)."""


class UnknownTaskError(KeyError, ValueError):
    """Raised by :func:`get_task` for a name that is not in :data:`TASKS`.

    It is both a ``KeyError`` (registry lookup) and a ``ValueError`` (bad argument) so
    callers can catch whichever they expect.
    """

    def __str__(self) -> str:
        # KeyError.__str__ would repr() the message and wrap it in quotes.
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Example:
    """One input/output pair.

    Attributes:
        input: The text that fills ``{x}`` in the query template.
        output: The verbalised answer WITHOUT a leading space (e.g. ``"cold"``,
            ``"positive"``, ``"True"``); the answer template adds the space.
        alternatives: Other answers to accept in evaluation (only the gender pairs list
            some, e.g. ``épouse`` / ``femme``); empty for all other tasks.
    """

    input: str
    output: str
    alternatives: tuple[str, ...] = ()


@dataclass(frozen=True)
class RowSpec:
    """How one raw data row becomes an :class:`Example`.

    Attributes:
        input_template: ``str.format`` template over the row's fields that builds the
            example input, e.g. ``"{input}"`` or
            ``"{premise} Question: {hypothesis} True or False?"``.
        output_field: Row field that holds the verbalised answer.
        strip_output: Characters stripped from both ends of the answer (myopic answers
            are stored as ``"(A)"`` but the label word is ``"A"``).
        alternatives_field: Optional row field with a list of further accepted answers.
    """

    input_template: str = "{input}"
    output_field: str = "output"
    strip_output: str = ""
    alternatives_field: str | None = None

    @property
    def required_fields(self) -> tuple[str, ...]:
        """Row fields that must be present and be non-empty strings."""
        names = [f for _, f, _, _ in string.Formatter().parse(self.input_template) if f]
        return tuple(dict.fromkeys([*names, self.output_field]))

    def to_example(self, row: dict[str, Any]) -> Example:
        """Builds the example for one validated row."""
        out = row[self.output_field].strip(self.strip_output) if self.strip_output else row[self.output_field]
        alts: tuple[str, ...] = ()
        if self.alternatives_field and isinstance(row.get(self.alternatives_field), list):
            alts = tuple(str(a) for a in row[self.alternatives_field])
        return Example(self.input_template.format(**row), out, alts)


@dataclass(frozen=True)
class Task:
    """A task: its prompt format, label set and data files.

    Attributes:
        name: Registry key.
        kind: ``"generation"`` or ``"classification"``.
        query_template: Format of one query; ``{x}`` is the example input.
        answer_template: Format of one answer; ``{y}`` is the example output. The leading
            space lives here, not in the data.
        separator: Text between demonstrations in an ICL prompt.
        labels: The verbalised label set of a classification task, else ``None``.
        files: Data files relative to the data folder (the pool first, then
            ``eval_file`` if there is one). An absolute path is used as is, outside the
            data folder; :meth:`from_jsonl` and :meth:`from_json` store one.
        eval_split_note: Which source file the test split comes from.
        description: One-line human description.
        eval_file: The entry of ``files`` that is a separate evaluation set (the test
            split is taken from it and train/validation from the other files), or
            ``None`` when train/validation/test are all cut from one shuffled pool.
        row_specs: How each raw row becomes examples; a row yields one example per spec
            (``gender_en_fr`` uses two: masculine and feminine).
        split_by_row: Whether rows (not examples) are assigned to splits, so both
            examples made from one row land in the same split.
    """

    name: str
    kind: TaskKind
    query_template: str = DEFAULT_QUERY
    answer_template: str = DEFAULT_ANSWER
    separator: str = DEFAULT_SEPARATOR
    labels: tuple[str, ...] | None = None
    files: tuple[str, ...] = ()
    eval_split_note: str = ""
    description: str = ""
    eval_file: str | None = None
    row_specs: tuple[RowSpec, ...] = (RowSpec(),)
    split_by_row: bool = False

    def __post_init__(self) -> None:
        # Fail at definition time rather than deep inside an experiment.
        if self.kind not in ("generation", "classification"):
            raise ValueError(f"Task {self.name!r}: kind must be 'generation' or 'classification', got {self.kind!r}")
        if (self.kind == "classification") != (self.labels is not None):
            raise ValueError(f"Task {self.name!r}: labels must be set exactly when kind is 'classification'")
        if "{x}" not in self.query_template or "{y}" not in self.answer_template:
            raise ValueError(f"Task {self.name!r}: query_template needs '{{x}}' and answer_template needs '{{y}}'")
        if self.eval_file is not None and self.eval_file not in self.files:
            raise ValueError(f"Task {self.name!r}: eval_file {self.eval_file!r} is not one of files {self.files}")
        if not self.files or not self.row_specs:
            raise ValueError(f"Task {self.name!r}: needs at least one data file and one row spec")

    @classmethod
    def from_jsonl(
        cls,
        path: str | Path,
        *,
        kind: TaskKind = "generation",
        name: str | None = None,
        query_template: str = DEFAULT_QUERY,
        answer_template: str = DEFAULT_ANSWER,
        separator: str = DEFAULT_SEPARATOR,
        description: str | None = None,
    ) -> Task:
        """A task read from a JSONL file: one ``{"input": ..., "output": ...}`` object per line.

        The file is validated now (and read again, through ``datasets``, by :func:`load_splits`). Other
        fields on a line are ignored; blank lines are skipped. Outputs are written without a leading space
        (the answer template adds it). The task is cut like the registry's single-file tasks (see
        :func:`load_splits`): shuffled, then 600 / 400 / rest from 1,400 rows on, else 50 / 25 / 25 %.

        Args:
            path: The file; any suffix except ``.json`` (use :meth:`from_json` for a JSON list). Stored
                in ``files`` as an absolute path.
            kind: ``"generation"`` (scored on the first token of the output) or ``"classification"``
                (labels = the sorted distinct outputs, at least two; scored on their first tokens, which
                must differ for a model's tokenizer: see :func:`check_label_tokens`).
            name: Task name; default the file's stem. Must not be a registered task's name.
            query_template, answer_template, separator: The prompt format (default the paper's
                ``"Q: {x}\\nA:"``, ``" {y}"``, ``"\\n\\n"``).
            description: One line; default names the file.

        Raises:
            MissingDataFileError: The file does not exist.
            DataFileError: The file is empty, not UTF-8, has a malformed line, a row without non-empty
                ``input`` / ``output`` strings, an output with surrounding whitespace, or (classification)
                fewer than two distinct outputs; the message names the file, the 1-based line and what
                was expected.
            ValueError: An unknown ``kind``, a registered task's ``name``, or templates without
                ``{x}`` / ``{y}``.
        """
        return _task_from_file(
            Path(path), "jsonl", kind=kind, name=name, query_template=query_template,
            answer_template=answer_template, separator=separator, description=description,
        )

    @classmethod
    def from_json(
        cls,
        path: str | Path,
        *,
        kind: TaskKind = "generation",
        name: str | None = None,
        query_template: str = DEFAULT_QUERY,
        answer_template: str = DEFAULT_ANSWER,
        separator: str = DEFAULT_SEPARATOR,
        description: str | None = None,
    ) -> Task:
        """A task read from a Function-Vector-style JSON list ``[{"input": ..., "output": ...}, ...]``.

        As :meth:`from_jsonl` (same arguments and errors), for a file whose name ends in ``.json``; an
        error names the line where the offending list item starts.
        """
        return _task_from_file(
            Path(path), "json", kind=kind, name=name, query_template=query_template,
            answer_template=answer_template, separator=separator, description=description,
        )

    def format_query(self, x: str) -> str:
        """Returns the query text for input ``x`` (no answer)."""
        # replace(), not format(): inputs may contain braces and templates stay literal.
        return self.query_template.replace("{x}", x)

    def format_answer(self, y: str) -> str:
        """Returns the answer text for label / output ``y`` (with its leading space)."""
        return self.answer_template.replace("{y}", y)

    def format_demo(self, ex: Example) -> str:
        """Returns one demonstration: query followed by answer, without separator."""
        return self.format_query(ex.input) + self.format_answer(ex.output)


@dataclass(frozen=True)
class TaskSplits:
    """Seeded train/validation/test splits of one task (no test input occurs in train or validation)."""

    task: Task
    train: tuple[Example, ...]
    validation: tuple[Example, ...]
    test: tuple[Example, ...]
    seed: int


_NLI3 = RowSpec("{premise} Question: {hypothesis} True, False, or Neither?", "verbalized")
_NLI2 = RowSpec("{premise} Question: {hypothesis} True or False?", "verbalized")
_FV_NOTE = "shuffled {file} cut 600/400/rest (50/25/25 % when under 1,400 items)"
_GENDER = "gender/pairs.jsonl"
_GENDER_NOTE = "86 hand-made pairs shuffled and cut 50/25/25 % by pair"


def _fv(name: str, file: str, description: str) -> Task:
    return Task(
        name=name,
        kind="generation",
        files=(f"fv/{file}",),
        eval_split_note=_FV_NOTE.format(file=f"fv/{file}"),
        description=description,
    )


def _pooled(name: str, labels: tuple[str, ...], pool: str, test: str, description: str, spec: RowSpec) -> Task:
    return Task(
        name=name,
        kind="classification",
        labels=labels,
        files=(pool, test),
        eval_file=test,
        eval_split_note=f"test = {test}; train/validation from {pool}",
        description=description,
        row_specs=(spec,),
    )


def _myopic(name: str, file: str, description: str) -> Task:
    # The answer template has no space and the query ends in "(" so that the first answer
    # token is the bare letter, identical for both labels' formatting.
    return Task(
        name=name,
        kind="classification",
        query_template="Q: {x}\nA: (",
        answer_template="{y}",
        labels=("A", "B"),
        files=(file,),
        eval_split_note=f"shuffled {file} (duplicate questions dropped) cut 50/25/25 %",
        description=description,
        row_specs=(RowSpec(output_field="output", strip_output="()"),),
    )


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        _fv("capital", "country-capital.json", "country -> capital city (FV country-capital)"),
        _fv("capitalize", "capitalize.json", "word -> word with first letter capitalised (FV capitalize)"),
        _fv("antonym", "antonym.json", "word -> antonym (FV antonym)"),
        _fv("english_french", "english-french.json", "English word -> French word (FV english-french)"),
        _pooled(
            "sst2",
            ("negative", "positive"),
            "sst2/train.jsonl",
            "sst2/test.jsonl",
            "SST-2 sentence sentiment",
            RowSpec(),
        ),
        _pooled(
            "trec",
            ("abbreviation", "description", "entity", "human", "location", "number"),
            "trec/train.jsonl",
            "trec/test.jsonl",
            "TREC question type (6 coarse classes)",
            RowSpec(),
        ),
        # SNLI ships no train split here (too large); its dev sample is the demonstration pool.
        _pooled(
            "snli",
            ("True", "Neither", "False"),
            "snli/dev.jsonl",
            "snli/test.jsonl",
            "SNLI entailment (True/Neither/False)",
            _NLI3,
        ),
        # RTE test labels are not public, so its dev set is the evaluation set.
        _pooled(
            "rte",
            ("True", "False"),
            "rte/train.jsonl",
            "rte/dev.jsonl",
            "RTE entailment (True/False)",
            _NLI2,
        ),
        _pooled(
            "agnews",
            ("World", "Sports", "Business", "Science"),
            "agnews/train.jsonl",
            "agnews/test.jsonl",
            "AG News topic (pool has only 64 rows)",
            RowSpec(),
        ),
        Task(
            name="gender_masc_fem",
            kind="generation",
            files=(_GENDER,),
            eval_split_note=_GENDER_NOTE,
            description="English masculine noun -> English feminine noun",
            row_specs=(RowSpec("{english_masc}", "english_fem"),),
        ),
        Task(
            name="gender_en_fr",
            kind="generation",
            files=(_GENDER,),
            eval_split_note=_GENDER_NOTE,
            description="English noun -> French noun of the same gender (both genders)",
            row_specs=(
                RowSpec("{english_masc}", "french_masc", alternatives_field="french_masc_alternatives"),
                RowSpec("{english_fem}", "french_fem", alternatives_field="french_fem_alternatives"),
            ),
            split_by_row=True,
        ),
        Task(
            name="gender_composed",
            kind="generation",
            files=(_GENDER,),
            eval_split_note=_GENDER_NOTE,
            description="English masculine noun -> French feminine noun (composition)",
            row_specs=(RowSpec("{english_masc}", "french_fem", alternatives_field="french_fem_alternatives"),),
        ),
        _myopic("myopic", "myopic/human.jsonl", "myopic-reward A/B questions (human-written; label = myopic choice)"),
        _myopic("myopic_lm", "myopic/lm.jsonl", "myopic-reward A/B questions (model-written; label = myopic choice)"),
    )
}

#: Tasks of the paper's main tables.
PAPER_TASKS: tuple[str, ...] = ("capital", "capitalize", "antonym", "sst2", "trec", "snli", "rte")


def get_task(name: str | Task) -> Task:
    """Looks up a task by name (a :class:`Task` is returned unchanged).

    Raises:
        UnknownTaskError: ``name`` is not registered; the message lists the allowed names.
    """
    if isinstance(name, Task):
        return name
    try:
        return TASKS[name]
    except KeyError:
        raise UnknownTaskError(f"unknown task {name!r}; allowed names: {', '.join(sorted(TASKS))}") from None


def label_words(task: str | Task) -> tuple[str, ...]:
    """Returns the verbalised labels of a classification task (without leading space).

    Raises:
        ValueError: The task is a generation task (it has no fixed label set).
    """
    t = get_task(task)
    if t.labels is None:
        raise ValueError(f"task {t.name!r} is a generation task and has no label words")
    return t.labels


def data_root(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Resolves the data folder: the argument, else ``$LTV_DATA_DIR``, else ``<repo>/data``."""
    if data_dir is not None:
        return Path(data_dir)
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent / "data"


# ---------------------------------------------------------------------------------------
# Reading and validating files
# ---------------------------------------------------------------------------------------
# Files are first checked by a small validating reader, which reports the exact line of a malformed
# row (`datasets` would only say that parsing failed), then loaded with `datasets.load_dataset("json")`
# from the local file (never the hub), whose rows are the ones used.


def _check_row(obj: Any, path: Path, line: int, required: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise DataFileError(
            f"{path}:{line}: expected a JSON object with fields {list(required)}, got {type(obj).__name__}"
        )
    for key in required:
        value = obj.get(key)
        if not isinstance(value, str) or not value.strip():
            what = "missing" if key not in obj else f"not a non-empty string ({value!r})"
            raise DataFileError(f"{path}:{line}: field {key!r} is {what}; expected fields {list(required)}")
    return obj


def _read_jsonl(path: Path, text: str, required: tuple[str, ...]) -> list[tuple[int, dict[str, Any]]]:
    rows: list[tuple[int, dict[str, Any]]] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue  # a trailing blank line is harmless
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataFileError(
                f"{path}:{line_no}: malformed JSON ({e.msg}); expected one object per line with fields {list(required)}"
            ) from None
        rows.append((line_no, _check_row(obj, path, line_no, required)))
    return rows


def _read_json_list(path: Path, text: str, required: tuple[str, ...]) -> list[tuple[int, dict[str, Any]]]:
    # Decode item by item so an error can be reported with the line where the item starts.
    decoder = json.JSONDecoder()
    ws = " \t\r\n"

    def line_of(pos: int) -> int:
        return text.count("\n", 0, pos) + 1

    def skip(pos: int) -> int:
        while pos < len(text) and text[pos] in ws:
            pos += 1
        return pos

    pos = skip(0)
    if text[pos] != "[":
        raise DataFileError(f"{path}:{line_of(pos)}: expected a JSON list '[' of objects with fields {list(required)}")
    rows: list[tuple[int, dict[str, Any]]] = []
    pos = skip(pos + 1)
    if pos < len(text) and text[pos] == "]":
        pos += 1
    else:
        while True:
            start = line_of(pos)
            try:
                obj, pos = decoder.raw_decode(text, pos)
            except json.JSONDecodeError as e:
                raise DataFileError(
                    f"{path}:{e.lineno}: malformed JSON ({e.msg}); expected objects with fields {list(required)}"
                ) from None
            rows.append((start, _check_row(obj, path, start, required)))
            pos = skip(pos)
            if pos < len(text) and text[pos] == ",":
                pos = skip(pos + 1)
                continue
            if pos < len(text) and text[pos] == "]":
                pos += 1
                break
            raise DataFileError(f"{path}:{line_of(pos)}: expected ',' or ']' after a list item")
    if skip(pos) != len(text):
        raise DataFileError(f"{path}:{line_of(skip(pos))}: unexpected text after the JSON list")
    if not rows:
        raise DataFileError(f"{path}:1: the JSON list is empty; expected objects with fields {list(required)}")
    return rows


def _validated_rows(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict[str, Any]]]:
    """The rows of a ``.json`` list or a JSONL file (any other suffix), with their 1-based line numbers."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataFileError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); expected JSON rows") from None
    if not text.strip():
        raise DataFileError(f"{path}:1: file is empty; expected JSON rows with fields {list(required)}")
    reader = _read_json_list if path.suffix == ".json" else _read_jsonl
    return reader(path, text, required)


@lru_cache(maxsize=64)
def _read_rows_cached(
    path: Path, mtime_ns: int, size: int, required: tuple[str, ...]
) -> tuple[tuple[int, dict[str, Any]], ...]:
    # mtime/size in the key: a file rewritten in place (tests, edits) is read again.
    del mtime_ns, size
    checked = _validated_rows(path, required)
    rows = _load_with_datasets(path)
    if len(rows) != len(checked):
        raise DataFileError(f"{path}: datasets read {len(rows)} rows where the file has {len(checked)}")
    return tuple((line, row) for (line, _), row in zip(checked, rows))


def _load_with_datasets(path: Path) -> list[dict[str, Any]]:
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import datasets

    from .paths import cache_root

    datasets.disable_progress_bars()
    try:
        ds = datasets.load_dataset(
            "json", data_files=str(path), split="train", cache_dir=str(cache_root() / "datasets")
        )
    except Exception as exc:  # schema clashes between rows, unreadable file, ...
        raise DataFileError(f"{path}: datasets could not load the file: {exc}") from exc
    return ds.to_list()


def _task_from_file(
    path: Path,
    fmt: Literal["jsonl", "json"],
    *,
    kind: TaskKind,
    name: str | None,
    query_template: str,
    answer_template: str,
    separator: str,
    description: str | None,
) -> Task:
    """:meth:`Task.from_jsonl` / :meth:`Task.from_json`: validates the file and builds the task."""
    path = path.expanduser().absolute()
    if kind not in ("generation", "classification"):
        raise ValueError(f"kind must be 'generation' or 'classification', got {kind!r}")
    if (fmt == "json") != (path.suffix == ".json"):
        # load_splits picks the reader by suffix, so the suffix must say which format the file is in
        want = "a JSON list in a file ending in .json" if fmt == "json" else "JSONL in a file not ending in .json"
        other = "Task.from_jsonl" if fmt == "json" else "Task.from_json"
        raise DataFileError(f"{path}: Task.from_{fmt} reads {want}; use {other} for this file or rename it")
    if not path.is_file():
        raise MissingDataFileError(
            f"{path}: file not found; expected {'a JSON list' if fmt == 'json' else 'one JSON object per line'} "
            "with string fields 'input' and 'output'"
        )
    name = path.stem if name is None else name
    if name in TASKS:
        raise ValueError(f"task name {name!r} is a registered task's; give the task from {path} another name")
    rows = _validated_rows(path, ("input", "output"))
    for line, row in rows:
        out = row["output"]
        if out != out.strip():
            raise DataFileError(
                f"{path}:{line}: output {out!r} has leading or trailing whitespace; expected the bare answer "
                f"(the answer template {answer_template!r} adds any space)"
            )
    labels: tuple[str, ...] | None = None
    if kind == "classification":
        labels = tuple(sorted({row["output"] for _, row in rows}))
        if len(labels) < 2:
            raise DataFileError(
                f"{path}:{rows[0][0]}: a classification task needs at least two distinct outputs (its labels), "
                f"found only {list(labels)}"
            )
    return Task(
        name=name,
        kind=kind,
        query_template=query_template,
        answer_template=answer_template,
        separator=separator,
        labels=labels,
        files=(str(path),),
        eval_split_note=_FV_NOTE.format(file=path),
        description=description if description is not None else f"{kind} task from {path}",
    )


def check_label_tokens(task: str | Task, tokenizer: Any) -> dict[str, int]:
    """The first answer token of each label of a classification task, checked to be distinct.

    Classification is scored on the first token of each label's answer text (``task.format_answer``,
    tokenised as :func:`ltvlib.prompts.answer_ids` does), so two labels that start with the same token
    could not be told apart.

    Returns:
        ``{label: first token id}``.

    Raises:
        ValueError: A generation task, a label that tokenises to nothing, or two labels with the same
            first token (the message names both and the token).
    """
    t = get_task(task)
    labels = label_words(t)
    firsts = [ids[0] for ids in answer_ids(tokenizer, t, labels)]
    owner: dict[int, str] = {}
    for label, first in zip(labels, firsts):
        if first in owner:
            raise ValueError(
                f"task {t.name!r}: labels {owner[first]!r} and {label!r} both start with the token "
                f"{tokenizer.decode([first])!r}; classification is scored on the first token, so each label "
                "must start with its own token (rename a label)"
            )
        owner[first] = label
    return dict(zip(labels, firsts))


def _read_examples(path: Path, task: Task) -> list[list[Example]]:
    """Reads one file; returns, per row, the examples it yields (one per row spec)."""
    if not path.is_file():
        where = "" if any(Path(f).is_absolute() for f in task.files) else f" (data folder: {path.parent.parent})"
        raise MissingDataFileError(f"data file {path} for task {task.name!r} not found{where}")
    required = tuple(dict.fromkeys(f for spec in task.row_specs for f in spec.required_fields))
    st = path.stat()
    out: list[list[Example]] = []
    for line_no, row in _read_rows_cached(path.resolve(), st.st_mtime_ns, st.st_size, required):
        exs = [spec.to_example(row) for spec in task.row_specs]
        for ex in exs:
            if task.labels is not None and ex.output not in task.labels:
                raise DataFileError(
                    f"{path}:{line_no}: label {ex.output!r} is not one of task {task.name!r} labels {list(task.labels)}"
                )
        out.append(exs)
    return out


def _dedupe(groups: list[list[Example]], seen: set[str]) -> list[list[Example]]:
    """Drops every row whose input was already seen (first occurrence wins); updates ``seen``."""
    kept: list[list[Example]] = []
    for exs in groups:
        inputs = {ex.input for ex in exs}
        if inputs & seen:
            continue
        seen |= inputs
        kept.append(exs)
    return kept


def _flatten(groups: list[list[Example]]) -> list[Example]:
    return [ex for exs in groups for ex in exs]


def _by_label(examples: list[Example], labels: tuple[str, ...]) -> dict[str, list[int]]:
    """Indices into ``examples`` of each label's examples, in order."""
    return {label: [i for i, e in enumerate(examples) if e.output == label] for label in labels}


def _in_turns(examples: list[Example], by_label: dict[str, list[int]], start: int, count: int) -> list[Example]:
    """Items ``start .. start + count - 1`` of every label, in turns: each turn holds one example of every label,
    in their order in ``examples`` (not the labels' order, so relabelling the examples, as the non-myopic
    direction of the myopic tasks does, keeps the order)."""
    turns = zip(*(idx[start : start + count] for idx in by_label.values()))
    return [examples[i] for turn in turns for i in sorted(turn)]


def _balanced_pool(
    pool: list[Example], labels: tuple[str, ...], k_train: int, k_val: int
) -> tuple[list[Example], list[Example]]:
    """Label-balanced train and validation pools drawn from one shuffled ``pool`` (eval-file layout).

    Training takes the first ``k_train // L`` items of each label (``L`` labels), validation the next
    ``k_val // L``; when the rarest label has fewer items than both need, its items are divided in the
    ratio ``k_train : k_val``.
    """
    by_label = _by_label(pool, labels)
    fewest = min(len(v) for v in by_label.values())
    per_train, per_val = k_train // len(labels), k_val // len(labels)
    if per_train + per_val > fewest:
        per_train = round(fewest * per_train / (per_train + per_val))
        per_val = fewest - per_train
    return _in_turns(pool, by_label, 0, per_train), _in_turns(pool, by_label, per_train, per_val)


def load_splits(
    task: str | Task,
    *,
    seed: int = 0,
    n_train: int = 600,
    n_val: int = 400,
    n_test: int | None = None,
    data_dir: str | Path | None = None,
    balance: bool | None = None,
) -> TaskSplits:
    """Loads a task's data and cuts seeded, deterministic, disjoint splits.

    Two layouts:

    * Tasks with a separate evaluation file (``sst2`` test, ``trec`` test, ``snli`` test,
      ``rte`` dev, ``agnews`` test): the test split is that file (deduplicated, shuffled
      with the seed); train and validation are the first ``n_train`` and next ``n_val``
      items of the shuffled pool after dropping every input that also occurs in the test
      file. If the pool is smaller than ``n_train + n_val`` it is divided in the ratio
      ``n_train : n_val`` (AG News: 64 rows -> 38 train / 26 validation by default).
    * Single-file tasks (FV word tasks, gender pairs, myopic): the deduplicated rows are
      shuffled once and cut into fixed regions: 600 / 400 / rest when there are at least
      1,400 rows (antonym, english_french), otherwise 50 % / 25 % / 25 % (capitalize
      813 -> 406/203/204, capital 197 -> 98/49/50, myopic 1,000 -> 500/250/250, gender
      86 pairs -> 43/21/22). The regions do not depend on ``n_train`` / ``n_val``, so the
      test split of a seed is the same whatever training size is asked for; ``n_train``
      and ``n_val`` only take the first items of their region. Gender tasks are cut by
      pair, so ``gender_en_fr`` (two examples per pair) gets 86/42/44.

    Requested sizes are upper bounds: a split is shorter when the data are.

    Label balance (classification tasks; on by default, ``balance=None``): the training and
    validation pools hold the same number of examples of every label, as many as the data
    allow, and list them in turns, each turn one example of every label in shuffled order
    (so any prefix whose length is a multiple of the number of labels is balanced too). They are
    drawn in the seeded shuffled order: with an evaluation file, training takes the first
    ``n_train // L`` examples of each of the ``L`` labels from the pool and validation the
    next ``n_val // L`` (the rarest label's examples divided ``n_train : n_val`` when it has
    too few); a single-file task balances inside its fixed training and validation regions.
    The test split is never balanced and never changes with ``balance`` (nor does the random
    sequence that cuts it). TREC's rarest label has 34 training rows, so its balanced pools
    are 120 / 84 examples. ``balance=False`` gives the unbalanced pools; generation tasks are
    never balanced.

    Args:
        task: Task name or :class:`Task`.
        seed: Seed of ``random.Random`` used for all shuffling.
        n_train: Maximum number of training examples.
        n_val: Maximum number of validation examples.
        n_test: Maximum number of test examples; ``None`` means all.
        data_dir: Data folder; default ``$LTV_DATA_DIR`` or ``<repo>/data``.
        balance: Balance the training and validation pools across labels; ``None`` (default)
            does for classification tasks and not for generation tasks.

    Returns:
        The splits; no test input occurs in train or validation.

    Raises:
        UnknownTaskError: Unknown task name.
        DataFileError: A data file is empty or malformed (message names file and line).
        FileNotFoundError: A data file is missing.
        ValueError: A negative size; ``balance=True`` for a generation task; a label without any
            example in the balanced pools' source.
    """
    t = get_task(task)
    if min(n_train, n_val) < 0 or (n_test is not None and n_test < 0):
        raise ValueError(f"sizes must be >= 0, got n_train={n_train}, n_val={n_val}, n_test={n_test}")
    if balance and t.labels is None:
        raise ValueError(f"task {t.name!r} cannot balance its pools across labels: a generation task has no labels")
    balanced = t.labels is not None if balance is None else balance
    root = data_root(data_dir)
    rng = random.Random(seed)

    if t.eval_file is not None:
        seen: set[str] = set()
        test_groups = _dedupe(_read_examples(root / t.eval_file, t), seen)
        pool_groups: list[list[Example]] = []
        for f in t.files:
            if f != t.eval_file:
                pool_groups += _read_examples(root / f, t)
        pool = _flatten(_dedupe(pool_groups, seen))  # `seen` holds the test inputs: no leakage
        test = _flatten(test_groups)
        rng.shuffle(pool)
        rng.shuffle(test)
        k_train, k_val = n_train, n_val
        if len(pool) < n_train + n_val and n_train + n_val > 0:
            k_train = round(len(pool) * n_train / (n_train + n_val))
            k_val = len(pool) - k_train
        if balanced:
            assert t.labels is not None
            _check_every_label(t, pool, "pool")
            train, val = _balanced_pool(pool, t.labels, k_train, k_val)
        else:
            train, val = pool[:k_train], pool[k_train : k_train + k_val]
    else:
        groups: list[list[Example]] = []
        for f in t.files:
            groups += _read_examples(root / f, t)
        groups = _dedupe(groups, set())
        if not t.split_by_row:
            groups = [[ex] for ex in _flatten(groups)]
        rng.shuffle(groups)
        n = len(groups)
        if n >= _CUT_TRAIN + 2 * _CUT_VAL:  # test at least as large as validation
            a, b = _CUT_TRAIN, _CUT_TRAIN + _CUT_VAL
        else:
            a, b = n // 2, n // 2 + n // 4
        train_all, val_all, test = _flatten(groups[:a]), _flatten(groups[a:b]), _flatten(groups[b:])
        if balanced:
            assert t.labels is not None
            train_by, val_by = _by_label(train_all, t.labels), _by_label(val_all, t.labels)
            _check_every_label(t, train_all, "training region")
            _check_every_label(t, val_all, "validation region")
            train = _in_turns(train_all, train_by, 0, min(n_train // len(t.labels), *map(len, train_by.values())))
            val = _in_turns(val_all, val_by, 0, min(n_val // len(t.labels), *map(len, val_by.values())))
        else:
            train, val = train_all[:n_train], val_all[:n_val]

    if n_test is not None:
        test = test[:n_test]
    return TaskSplits(task=t, train=tuple(train), validation=tuple(val), test=tuple(test), seed=seed)


def _check_every_label(task: Task, examples: list[Example], where: str) -> None:
    assert task.labels is not None
    missing = sorted(set(task.labels) - {e.output for e in examples})
    if missing:
        raise ValueError(
            f"task {task.name!r}: label(s) {missing} have no example in the {where}, so label-balanced "
            "pools would be empty; add examples of them or pass balance=False (--no-balance on the command line)"
        )


def task_rows(task: str | Task, *, data_dir: str | Path | None = None) -> list[tuple[Path, int, Example]]:
    """Every example of a task's data files, with the file and the 1-based line (or, in a JSON list, the line
    where its item starts) it comes from, in file order; a row yields one example per row spec.

    Read with the validating reader alone (no ``datasets`` cache is written), so a check of the rows (such as
    :func:`ltvlib.prompts.check_task_context`) can run, and fail, before anything is stored. Rows are not
    deduplicated or split (see :func:`load_splits` for that).

    Raises:
        UnknownTaskError: an unknown task name.
        MissingDataFileError: a data file is missing.
        DataFileError: a data file is empty or malformed (the message names file and line).
    """
    t = get_task(task)
    root = data_root(data_dir)
    required = tuple(dict.fromkeys(f for spec in t.row_specs for f in spec.required_fields))
    out: list[tuple[Path, int, Example]] = []
    for f in t.files:
        path = root / f  # an absolute entry (a task read from a file) stays as it is
        if not path.is_file():
            raise MissingDataFileError(f"data file {path} for task {t.name!r} not found")
        for line, row in _validated_rows(path, required):
            out.extend((path, line, spec.to_example(row)) for spec in t.row_specs)
    return out
