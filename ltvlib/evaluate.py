"""Batched first-token evaluation with left padding, logits at the last position only.

The paper's metric: the argmax over the whole vocabulary at the last prompt position equals the first
token of the gold answer. For classification tasks, the label-restricted accuracy (argmax over the first
tokens of the label words only) and the balanced accuracy (the mean over the gold labels present of the
first-token accuracy on that label's examples) are reported beside it. Per-example predictions are kept.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch

from .forward import DEFAULT_BATCH_TOKENS, PromptRunner, Tail, token_batches
from .heap import release_free_heap
from .inject import VectorEdit
from .prompts import answer_ids, encode_prompts, sample_demos
from .tasks import Example, Task, get_task

if TYPE_CHECKING:
    from .models import LoadedModel


@dataclass
class EvalResult:
    """Accuracy and per-example predictions.

    Attributes:
        accuracy: first-token accuracy over the full vocabulary, in [0, 1].
        label_accuracy: accuracy restricted to the label set (classification tasks), else None.
        balanced_accuracy: classification tasks: the mean over the gold labels present of the first-token
            accuracy (full vocabulary) on that label's examples, i.e. the mean per-label recall, so a
            constant prediction scores ``1 / labels present`` whatever the pool's balance; else None.
        predicted: decoded top-1 token per example.
        correct: per-example correctness (full vocabulary).
        label_predicted: predicted label word per example (classification), else None.
        gold_prob: probability of the gold first token per example.
    """

    accuracy: float
    label_accuracy: float | None
    predicted: list[str]
    correct: list[bool]
    label_predicted: list[str] | None
    gold_prob: list[float]
    balanced_accuracy: float | None = None

    @property
    def n(self) -> int:
        return len(self.correct)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class EvalSet:
    """Examples of a task turned into prompts, ready to evaluate many times (e.g. one per vector).

    Args:
        lm: the model.
        task: task or its name.
        examples: the queries with gold answers.
        shots: demonstrations per prompt (0 = zero-shot).
        demo_pool: where demonstrations come from (the training split); required when ``shots > 0``.
        seed: seeds the demonstration draw.
        tail: prompt positions recomputed per evaluation (1 = vectors at the last token; a
            :class:`~ltvlib.forward.PositionTail` = each prompt from its own injected position, for positions
            counted from the start; None = any position, full forwards).
        cache_rows: keep each prompt's prefix after its first evaluation (worth it when evaluating several
            vectors).
        demo_sets: None draws fresh demonstrations for every query; an integer ``n`` draws ``n`` fixed
            demonstration blocks and assigns queries to them in turn, so each block's keys/values are
            computed once and a query costs only its own tokens (much cheaper for long demonstrations).
        max_cache_bytes: memory cap of the prompts' prefix cache, over all demonstration blocks (rows beyond
            it are recomputed on every evaluation). 1.5 GiB holds 200 RTE test prompts (78 tokens on average,
            46 KB of keys/values per token on SmolLM2-135M in fp32) with room to spare; at 256 MiB two thirds
            of them were recomputed for every layer of a sweep, which cost about 15 minutes per RTE curve.
        first_layer: the earliest block vectors are expected to enter (earlier blocks' caches are not kept;
            see :class:`~ltvlib.forward.PromptRunner`).
    """

    def __init__(
        self,
        lm: LoadedModel,
        task: Task | str,
        examples: Sequence[Example],
        *,
        shots: int = 0,
        demo_pool: Sequence[Example] | None = None,
        seed: int = 0,
        tail: Tail = 1,
        cache_rows: bool = True,
        demo_sets: int | None = None,
        max_cache_bytes: int = 1536 * 2**20,
        first_layer: int = 0,
    ) -> None:
        self.task = get_task(task) if isinstance(task, str) else task
        self.examples = list(examples)
        if not self.examples:
            raise ValueError(f"no examples to evaluate for task {self.task.name!r}")
        if shots and not demo_pool:
            raise ValueError("shots > 0 needs a demo_pool")
        rng = random.Random(seed)
        # groups: (indices of the examples, shared demonstration block or None) -> one runner each
        groups: list[tuple[list[int], list[Example] | None]]
        per_query = None
        if shots and demo_sets:
            blocks = [sample_demos(demo_pool, shots, rng) for _ in range(demo_sets)]  # type: ignore[arg-type]
            groups = [(list(range(b, len(self.examples), demo_sets)), blocks[b]) for b in range(demo_sets)]
            groups = [g for g in groups if g[0]]
        else:
            if shots:
                per_query = [sample_demos(demo_pool, shots, rng, exclude=e.input) for e in self.examples]  # type: ignore[arg-type]
            groups = [(list(range(len(self.examples))), None)]
        self.groups: list[tuple[list[int], PromptRunner]] = []
        for index, block in groups:
            queries = [self.examples[i] for i in index]
            demos = [per_query[i] for i in index] if per_query is not None else None
            prompts = encode_prompts(lm.tokenizer, self.task, queries, demos=demos, shared_demos=block)
            runner = PromptRunner(
                lm, prompts, tail=tail, cache_rows=cache_rows, max_cache_bytes=max_cache_bytes // len(groups),
                first_layer=first_layer,
            )
            self.groups.append((index, runner))
        self.gold_first = [ids[0] for ids in answer_ids(lm.tokenizer, self.task, [e.output for e in self.examples])]
        self.label_first: list[int] | None = None
        if self.task.labels:
            self.label_first = [ids[0] for ids in answer_ids(lm.tokenizer, self.task, self.task.labels)]
        self.lm = lm

    @property
    def nbytes(self) -> int:
        """Bytes of the prompts' cached prefixes (keys/values and states) held so far, over all runners."""
        return sum(runner.cache_bytes for _, runner in self.groups)


MEMO_EVALSET_BYTES = 1536 * 2**20
"""Bound on the cached prefixes of all the test sets a model's memo keeps (``ltvs.test_sets`` and
``extracted.evalsets`` together, under the budget :data:`EVALSET_BUDGET`): 1.5 GiB. Measured on SmolLM2-135M in fp32:
RTE's 200 test prompts hold 0.67 GiB zero-shot (every block from 0) and 0.29 GiB at ten shots (ten fixed
demonstration blocks, only the queries cached). With the prompt store's bound (2 GiB) and the model (0.42 GiB
resident), the caches a chapter holds stay under 4 GiB. The book runner records each chapter's peak resident memory
in its executed notebook; ``bench/memory.py`` measures a chapter-sized unit's peak against the caches it holds
(``bench/README.md``)."""

EVALSET_BUDGET = "evalsets"
"""The :func:`ltvlib.memo.memo` budget every memo of test sets shares, so that together they stay within
:data:`MEMO_EVALSET_BYTES` (each alone could hold that much: two of them 3 GiB)."""


@torch.no_grad()
def evaluate(
    evalset: EvalSet,
    edits: Sequence[VectorEdit] = (),
    *,
    batch_size: int = 64,
    max_tokens: int = DEFAULT_BATCH_TOKENS,
) -> EvalResult:
    """Evaluate ``evalset`` with ``edits`` injected (none: the plain model), each where it says (layer, site,
    prompt position, add or replace: :class:`~ltvlib.inject.VectorEdit`), in batches of at most ``batch_size``
    prompts and ``max_tokens`` padded tokens (:func:`~ltvlib.forward.token_batches`; a prompt's first evaluation
    runs it in full, so the bound counts whole prompts)."""
    tok = evalset.lm.tokenizer
    n = len(evalset.examples)
    top, gold_p, label_pred = [0] * n, [0.0] * n, [0] * n
    for index, runner in evalset.groups:
        # Batches of similar length: a batch is padded to its longest prompt, and RTE's prompts run from 20 to
        # 278 tokens, so batching in split order spent about three padded tokens per real one.
        shared = len(runner.prompts.shared)
        lengths = [shared + len(row) for row in runner.prompts.rows]
        order = sorted(range(len(index)), key=lambda i: (lengths[i], i))
        for local in token_batches(order, lengths, batch_size, max_tokens):
            logits, _ = runner.run(local, edits)
            last = logits[:, -1].float()
            rows = [index[i] for i in local]
            gold = torch.tensor([evalset.gold_first[i] for i in rows], device=last.device)
            probs = last.softmax(-1).gather(1, gold[:, None])[:, 0].tolist()
            for r, t, p in zip(rows, last.argmax(-1).tolist(), probs):
                top[r], gold_p[r] = t, p
            if evalset.label_first is not None:
                for r, t in zip(rows, last[:, evalset.label_first].argmax(-1).tolist()):
                    label_pred[r] = t
    # the batches' temporaries are freed now; hand their pages back (resident memory had stayed 1.6-1.7x the caches)
    release_free_heap()
    correct = [t == g for t, g in zip(top, evalset.gold_first)]
    label_accuracy = balanced = None
    label_words = None
    if evalset.label_first is not None:
        balanced = balanced_accuracy(correct, [e.output for e in evalset.examples])
        labels = evalset.task.labels
        assert labels is not None
        label_words = [labels[i] for i in label_pred]
        label_accuracy = sum(w == e.output for w, e in zip(label_words, evalset.examples)) / len(correct)
    return EvalResult(
        accuracy=sum(correct) / len(correct),
        label_accuracy=label_accuracy,
        predicted=[tok.decode([t]) for t in top],
        correct=correct,
        label_predicted=label_words,
        gold_prob=gold_p,
        balanced_accuracy=balanced,
    )


def balanced_accuracy(correct: Sequence[bool], gold: Sequence[str]) -> float:
    """Mean over the distinct ``gold`` labels of the fraction of that label's examples that are ``correct``.

    Raises:
        ValueError: empty or mismatched inputs.
    """
    if not correct or len(correct) != len(gold):
        raise ValueError(f"balanced accuracy needs as many gold labels as results, got {len(gold)} and {len(correct)}")
    per_label: dict[str, list[bool]] = {}
    for c, g in zip(correct, gold):
        per_label.setdefault(g, []).append(bool(c))
    return sum(sum(v) / len(v) for v in per_label.values()) / len(per_label)
