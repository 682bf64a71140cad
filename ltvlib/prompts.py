"""Zero-shot and k-shot prompts, tokenised the same way on every code path.

A prompt is ``shared + row``: ``shared`` holds ids common to every row of a batch (the tokenizer's
special prefix such as Gemma's BOS, plus a shared demonstration block when there is one) and ``row`` the
row's own ids (its own demonstrations, if any, then the query). The demonstration block and the query are
tokenised separately and concatenated, so a full forward and a forward over a cached prefix see exactly
the same token sequence.

The default template is the paper's ``Q: {x}\\nA: {y}\\n\\n``; the query ends at ``A:`` and the answer
(``" {y}"``) is what the model must produce. Tasks may override the template.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

# answer_ids lives in a leaf module that the task registry imports too; it is re-exported here
from .answer_tokens import answer_ids, text_ids  # noqa: F401

if TYPE_CHECKING:
    from .tasks import Example, Task


@dataclass(frozen=True)
class EncodedPrompts:
    """Token ids of a set of prompts.

    Attributes:
        shared: ids that open every prompt (special prefix and, for shared demonstrations, the demos).
        rows: per prompt, the remaining ids (per-row demonstrations, then the query); never empty.
        texts: the full prompt strings, for display.
    """

    shared: tuple[int, ...]
    rows: tuple[tuple[int, ...], ...]
    texts: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.rows)

    def select(self, index: Sequence[int]) -> EncodedPrompts:
        return EncodedPrompts(self.shared, tuple(self.rows[i] for i in index), tuple(self.texts[i] for i in index))

    def full_rows(self) -> list[list[int]]:
        """Each prompt's complete id list (``shared + row``)."""
        return [list(self.shared) + list(row) for row in self.rows]


def special_prefix(tokenizer: Any) -> list[int]:
    """Ids the tokenizer puts before any text (e.g. ``<bos>`` for Gemma, nothing for SmolLM2)."""
    return list(tokenizer("", add_special_tokens=True).input_ids)


def demonstrations_text(task: Task, demos: Sequence[Example]) -> str:
    """The demonstration block: each demo as ``query + answer`` followed by the task's separator."""
    return "".join(task.format_demo(d) + task.separator for d in demos)


def encode_prompts(
    tokenizer: Any,
    task: Task,
    queries: Sequence[Example],
    *,
    demos: Sequence[Sequence[Example]] | None = None,
    shared_demos: Sequence[Example] | None = None,
    max_tokens: int | None = None,
) -> EncodedPrompts:
    """Tokenise zero-shot or k-shot prompts.

    Args:
        tokenizer: the model's tokenizer.
        task: gives the template.
        queries: one example per prompt (only ``input`` is used).
        demos: per-prompt demonstrations (k-shot with different demos per query), or None.
        shared_demos: one demonstration block shared by every prompt (put into ``shared`` so it can be
            cached once), or None. Zero-shot when both are None.
        max_tokens: the longest prompt allowed, in tokens (the model's context, :func:`context_length`);
            None: the tokenizer's ``model_max_length`` when it states a real bound; a model loaded through
            :func:`ltvlib.models.wrap_model` has its context there when its tokenizer stated none (SmolLM2's and
            Gemma 3's state none; a bare tokenizer without a bound checks nothing).

    Raises:
        ContextLengthError: a prompt longer than ``max_tokens``; the message names the query's file and line
            (for a task read from files), its token count and the limit.
    """
    limit = max_tokens if max_tokens is not None else tokenizer_limit(tokenizer)
    if demos is not None and shared_demos is not None:
        raise ValueError("give per-prompt demos or shared_demos, not both")
    if demos is not None and len(demos) != len(queries):
        raise ValueError(f"{len(demos)} demonstration lists for {len(queries)} queries")
    shared_text = demonstrations_text(task, shared_demos) if shared_demos else ""
    shared = special_prefix(tokenizer) + text_ids(tokenizer, shared_text)
    rows, texts = [], []
    for i, query in enumerate(queries):
        own = demonstrations_text(task, demos[i]) if demos is not None else ""
        q = task.format_query(query.input)
        row = text_ids(tokenizer, own) + text_ids(tokenizer, q)
        if not row:
            raise ValueError(f"query {query.input!r} of task {task.name!r} tokenises to nothing")
        if limit is not None and len(shared) + len(row) > limit:
            shots = len(demos[i]) if demos is not None else len(shared_demos or ())
            raise ContextLengthError(
                f"{_where(task, query)}: the {f'{shots}-shot' if shots else 'zero-shot'} prompt of this query "
                f"takes {len(shared) + len(row):,} tokens, more than the model's context of {limit:,} positions; "
                "shorten the input" + (" or use fewer demonstrations" if shots else "")
            )
        rows.append(tuple(row))
        texts.append(shared_text + own + q)
    return EncodedPrompts(tuple(shared), tuple(rows), tuple(texts))


class ContextLengthError(ValueError):
    """A prompt longer than the model's context. The message names the data file and the 1-based line of the
    offending row (where the task has files), its token count and the limit."""


def context_length(lm: Any) -> int | None:
    """The positions a model can attend over: ``max_position_embeddings`` of its (text) config.

    Args:
        lm: a :class:`~ltvlib.models.LoadedModel`, a ``PreTrainedModel`` or a config.

    Returns:
        the limit, or None when the config states none.
    """
    model = getattr(lm, "model", lm)
    config = getattr(model, "config", model)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    n = getattr(text, "max_position_embeddings", None)
    return int(n) if isinstance(n, int) and n > 0 else None


def tokenizer_limit(tokenizer: Any) -> int | None:
    """The tokenizer's ``model_max_length`` when it states a real bound; None for Hugging Face's "unset"
    (about 1e30) and anything else over a billion tokens."""
    n = getattr(tokenizer, "model_max_length", None)
    return int(n) if isinstance(n, int) and 0 < n < 10**9 else None


def _where(task: Task, query: Example) -> str:
    """``file:line`` of the data row a query comes from, or the task's name when no file holds it."""
    from .tasks import task_rows

    try:
        for path, line, ex in task_rows(task):
            if ex.input == query.input:
                return f"{path}:{line}"
    except (ValueError, OSError):  # a task whose files cannot be read here: name the task instead
        pass
    return f"task {task.name!r}, query {query.input[:40]!r}"


def check_task_context(task: Task | str, tokenizer: Any, max_tokens: int | None) -> int:
    """Check, before anything is trained, evaluated or stored, that every row of a task's data files fits
    the model: the zero-shot prompt of its input *and* its answer (training feeds both), tokenised as
    :func:`encode_prompts` and :func:`answer_ids` do.

    The rows are read with the validating reader (:func:`ltvlib.tasks.task_rows`: nothing is cached) and
    tokenised in one batch, so a file of long rows fails in seconds rather than after minutes of training on
    prompts past the model's positions.

    Args:
        task: a task or a registered task's name.
        tokenizer: the model's tokenizer.
        max_tokens: the model's context (:func:`context_length`); None checks nothing.

    Returns:
        the longest prompt-and-answer length over the rows, in tokens.

    Raises:
        ContextLengthError: some row is too long; the message names the file and line of the first one, its
            token count, the limit, and how many rows (at which lines) exceed it.
    """
    from .tasks import get_task, task_rows

    t = get_task(task)
    rows = task_rows(t)
    if not rows:
        return 0

    def lengths(texts: list[str]) -> list[int]:
        ids = tokenizer([x for x in texts], add_special_tokens=False).input_ids
        return [len(i) if x else 0 for i, x in zip(ids, texts)]

    prefix = len(special_prefix(tokenizer))
    queries = lengths([t.format_query(ex.input) for _, _, ex in rows])
    answers = lengths([t.format_answer(ex.output) for _, _, ex in rows])
    totals = [prefix + q + a for q, a in zip(queries, answers)]
    if max_tokens is None:
        return max(totals)
    over = [i for i, n in enumerate(totals) if n > max_tokens]
    if over:
        path, line, _ = rows[over[0]]
        lines = ", ".join(str(rows[i][1]) for i in over[:10]) + (", ..." if len(over) > 10 else "")
        raise ContextLengthError(
            f"{path}:{line}: the prompt and answer of this row take {totals[over[0]]:,} tokens, more than the "
            f"model's context of {max_tokens:,} positions (max_position_embeddings); {len(over)} of the "
            f"{len(rows)} rows of task {t.name!r} are too long (lines {lines}): shorten or drop them"
        )
    return max(totals)


@dataclass(frozen=True)
class CutInput:
    """A row whose input :func:`cut_inputs` shortened.

    Attributes:
        path, line: where the row is (1-based line).
        original: its input; input: the input cut to fit; tokens: its prompt-and-answer tokens before the cut.
    """

    path: Path
    line: int
    original: str
    input: str
    tokens: int


def cut_inputs(task: Task | str, tokenizer: Any, max_tokens: int) -> list[CutInput]:
    """The rows of a task's files whose prompt and answer take more than ``max_tokens`` tokens, each with its
    input cut (its first tokens kept, decoded back to text) so that they fit; an explicit alternative to the
    error of :func:`check_task_context`.

    Raises:
        ContextLengthError: a row that does not fit even with an empty input (its template and answer alone
            are too long); the message names its file and line.
    """
    from .tasks import get_task, task_rows

    t = get_task(task)
    prefix = len(special_prefix(tokenizer))

    def total(x: str, y: str) -> int:
        return prefix + len(text_ids(tokenizer, t.format_query(x))) + len(text_ids(tokenizer, t.format_answer(y)))

    cuts = []
    for path, line, ex in task_rows(t):
        before = total(ex.input, ex.output)
        if before <= max_tokens:
            continue
        ids = text_ids(tokenizer, ex.input)
        keep, text, now = len(ids), ex.input, before
        while now > max_tokens:
            keep -= max(1, now - max_tokens)
            if keep <= 0:
                raise ContextLengthError(
                    f"{path}:{line}: the prompt template and answer of this row alone take more than {max_tokens:,} "
                    "tokens; its input cannot be cut to fit"
                )
            text = tokenizer.decode(ids[:keep])
            now = total(text, ex.output)
        cuts.append(CutInput(path, line, ex.input, text, before))
    return cuts


def sample_demos(pool: Sequence[Example], k: int, rng: random.Random, exclude: str | None = None) -> list[Example]:
    """``k`` demonstrations drawn without replacement from ``pool``, never with input ``exclude``."""
    candidates = [e for e in pool if e.input != exclude] if exclude is not None else list(pool)
    if k > len(candidates):
        raise ValueError(f"asked for {k} demonstrations but the pool has only {len(candidates)}")
    return rng.sample(candidates, k)


def pad_left(
    rows: Sequence[Sequence[int]], pad_id: int, device: torch.device | None = None, *, width: int | None = None
) -> tuple[Tensor, Tensor]:
    """Left-pad id lists to ``(batch, width)`` ids and mask (1 = real token); width defaults to the longest."""
    width = max(len(r) for r in rows) if width is None else width
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r) :] = 1
    return ids.to(device), mask.to(device)


def pad_right(rows: Sequence[Sequence[int]], pad_id: int, width: int, device: torch.device | None = None) -> tuple[Tensor, Tensor]:
    """Right-pad id lists to ``(batch, width)`` ids and mask."""
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            mask[i, : len(r)] = 1
    return ids.to(device), mask.to(device)


def positions_from_mask(mask: Tensor, start: Tensor | int = 0) -> Tensor:
    """Position ids that count real tokens only: ``start + (number of real tokens before)``; pads get the
    position of the previous real token (they are masked anyway)."""
    start_t = torch.as_tensor(start, device=mask.device).reshape(-1, 1)
    return start_t + (mask.long().cumsum(-1) - 1).clamp(min=0)
