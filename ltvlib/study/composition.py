"""Composing learned task vectors: English->French plus masculine->feminine on English masculine -> French feminine.

The tasks (:mod:`ltvlib.tasks`, 86 hand-made pairs in ``data/gender/pairs.jsonl``):

- ``gender_en_fr``: an English noun -> the French noun of the same gender (both genders of every pair);
- ``gender_masc_fem``: an English masculine noun -> its English feminine;
- ``gender_composed``: an English masculine noun -> the French feminine (the composition of the two).

All three cut the *pairs* 50/25/25 % with the same seeded shuffle, so a test pair is a test pair of every task.
Every vector is one ``(d_model,)`` LTV *added* at the block input of the middle layer at the last prompt
position, trained on zero-shot prompts with the run's recipe; sums of vectors go to that same site.

**No test word in any training data.** Pairs share words (``girl`` and ``daughter`` are both *fille*;
*petit-fils*, *belle-fille* and *femme d'affaires* contain other pairs' words), and the book's metric scores
only the answer's *first token*, so a shared word would leak. :func:`composition_data` collects every word of
every form of every test pair (both English and both French forms and their accepted alternatives, split at
spaces, hyphens and apostrophes, case-folded) and drops from the training and validation splits of all
three tasks (and so from the ICL demonstration pool) each example that contains one of them;
:func:`check_no_leak` asserts the result and every function that trains or prompts calls it.

**Scores** (:class:`FormScorer`), on the composed task's test queries:

- ``accuracy``: the book's metric, top-1 next token over the whole vocabulary equals the first token of the
  gold French feminine noun;
- ``accepted_accuracy``: the same, also accepting the first token of an alternative spelling (*soeur*);
- ``form_choice``: which of the pair's four forms (French feminine, French masculine, English feminine, the
  English masculine query itself) gets the highest total log-probability as the answer, as shares of the
  queries. This separates "translated" from "made feminine", which the first token cannot always do (*fils*
  and *fille* may start with the same token).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from ..analysis.controls import random_like
from ..cache import cached_json, dependency_hash
from ..forward import PromptRunner
from ..inject import VectorEdit
from ..ltv import LearnedTaskVector, train_ltv
from ..prompts import answer_ids, encode_prompts, sample_demos
from ..tasks import Example, TaskSplits, data_root, get_task
from .generalization import initial_vectors
from .ltvs import RunSizes
from .sizes import CompositionSizes

if TYPE_CHECKING:
    from ..models import LoadedModel

EN_FR, MASC_FEM, COMPOSED = "gender_en_fr", "gender_masc_fem", "gender_composed"
COMPONENTS: tuple[str, str] = (EN_FR, MASC_FEM)
TASKS: tuple[str, ...] = (EN_FR, MASC_FEM, COMPOSED)
#: Seed offset of the random control vectors.
RANDOM_SEED_BASE = 7919
#: The four forms of a pair, in the order that breaks ties between identical strings (*fiancée* is both the
#: English and the French feminine: choosing it counts as the French feminine).
FORMS: tuple[str, ...] = ("french_fem", "french_masc", "english_fem", "english_masc")
#: The pair file's field of each form.
FORM_OF: dict[str, str] = {"french_fem": "french_fem", "french_masc": "french_masc", "english_fem": "english_fem",
                           "english_masc": "english_masc"}
FORMS_FIELDS: tuple[str, ...] = tuple(FORM_OF)

class LeakError(AssertionError):
    """A test word occurs in a vector's training or validation data (or in an ICL demonstration pool)."""


def words(text: str) -> set[str]:
    """Case-folded words of ``text``, split at whitespace, hyphens and apostrophes (``"petit-fils"`` ->
    ``{"petit", "fils"}``)."""
    return {w for w in re.split(r"[\s\-'\u2019]+", text.casefold()) if w}


def example_words(ex: Example) -> set[str]:
    """Every word of an example's input, output and accepted alternatives."""
    out: set[str] = set()
    for text in (ex.input, ex.output, *ex.alternatives):
        out |= words(text)
    return out


@dataclass(frozen=True)
class CompositionData:
    """The three tasks' splits with every test word removed from training and validation.

    Attributes:
        splits: per task, train and validation without test words; test as :func:`ltvlib.tasks.load_splits`
            cuts it (the composed task's is cut to ``run_sizes.n_test``).
        banned: the test words (every word of every form of every test pair of the three tasks).
        dropped: per task, the training and validation examples removed.
        forms: per composed test query, each form of its pair -> its accepted spellings.
    """

    splits: dict[str, TaskSplits]
    banned: frozenset[str]
    dropped: dict[str, tuple[Example, ...]]
    forms: tuple[dict[str, tuple[str, ...]], ...]

    @property
    def test(self) -> tuple[Example, ...]:
        """The composed task's test queries."""
        return self.splits[COMPOSED].test

    def fingerprint(self, task: str) -> str:
        """sha256[:16] of the task's cleaned splits (part of every cache key)."""
        s = self.splits[task]
        payload = [[asdict(e) for e in s.train], [asdict(e) for e in s.validation], [asdict(e) for e in s.test]]
        return hashlib.sha256(json.dumps(payload, ensure_ascii=False).encode()).hexdigest()[:16]


#: The pair files, in order: the original hand-made list and the pairs written to give the composed task a test
#: set of 100 pairs (``data/gender/SOURCE.md``).
PAIR_FILES: tuple[str, ...] = ("gender/pairs.jsonl", "gender/pairs_more.jsonl")
#: Composed test pairs, validation pairs (the rest train), and the split's seed.
TEST_PAIRS, VAL_PAIRS, SPLIT_SEED = 100, 20, 0


def gender_pairs(data_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """Every gendered noun pair of :data:`PAIR_FILES`, in file order (one dict per pair: ``english_masc``,
    ``english_fem``, ``french_masc``, ``french_fem``, ``category`` and optional ``*_alternatives``).

    Raises:
        ValueError: an English masculine noun occurs twice (the queries would not be distinct).
    """
    root = data_root(data_dir)
    pairs = [json.loads(line) for f in PAIR_FILES for line in (root / f).read_text(encoding="utf-8").splitlines()
             if line.strip()]
    seen = [p["english_masc"] for p in pairs]
    if len(set(seen)) != len(seen):
        raise ValueError(f"repeated English masculine nouns: {sorted({w for w in seen if seen.count(w) > 1})}")
    return pairs


def _spellings(pair: Mapping[str, Any], form: str) -> tuple[str, ...]:
    return (str(pair[form]), *(str(a) for a in pair.get(f"{form}_alternatives", [])))


def pair_examples(task: str, pair: Mapping[str, Any]) -> list[Example]:
    """The examples of ``task`` one pair gives: ``gender_en_fr`` two (masculine and feminine), the others one."""
    def ex(query: str, form: str) -> Example:
        first, *alts = _spellings(pair, form)
        return Example(str(pair[query]), first, tuple(alts))

    if task == EN_FR:
        return [ex("english_masc", "french_masc"), ex("english_fem", "french_fem")]
    if task == MASC_FEM:
        return [ex("english_masc", "english_fem")]
    if task == COMPOSED:
        return [ex("english_masc", "french_fem")]
    raise ValueError(f"unknown composition task {task!r}; allowed: {', '.join(TASKS)}")


def split_pairs(pairs: Sequence[Mapping[str, Any]], test_pairs: int = TEST_PAIRS, val_pairs: int = VAL_PAIRS,
                seed: int = SPLIT_SEED) -> tuple[list[Any], list[Any], list[Any]]:
    """The pairs shuffled (``random.Random(f"composition-split-{seed}")``) and cut into test, validation and
    training pairs, in that order: every task's splits come from the same cut, so a test pair is a test pair of
    all three tasks.

    Raises:
        ValueError: fewer than ``test_pairs + val_pairs + 1`` pairs (no training pair would be left).
    """
    if test_pairs < 1 or val_pairs < 1 or len(pairs) <= test_pairs + val_pairs:
        raise ValueError(f"{len(pairs)} pairs cannot give {test_pairs} test and {val_pairs} validation pairs and "
                         "leave training pairs")
    order = list(pairs)
    random.Random(f"composition-split-{seed}").shuffle(order)
    return order[test_pairs + val_pairs:], order[test_pairs:test_pairs + val_pairs], order[:test_pairs]


def composition_data(run_sizes: RunSizes, *, test_pairs: int = TEST_PAIRS, val_pairs: int = VAL_PAIRS,
                     data_dir: str | Path | None = None) -> CompositionData:
    """The three tasks' splits (:func:`split_pairs` of :func:`gender_pairs`), cleaned of test words (see module
    doc). Training and validation are capped at ``run_sizes.n_train`` / ``n_val`` examples after cleaning; the
    composed test set has one query per test pair.

    Raises:
        LeakError: a test word is left in some training or validation split (never expected: this is the
            assertion that the filtering worked).
    """
    train_p, val_p, test_p = split_pairs(gender_pairs(data_dir), test_pairs, val_pairs)
    banned: set[str] = set()
    for p in test_p:
        for form in FORMS_FIELDS:
            for spelling in _spellings(p, form):
                banned |= words(spelling)
    splits, dropped = {}, {}
    for t in TASKS:
        train = [e for p in train_p for e in pair_examples(t, p)]
        val = [e for p in val_p for e in pair_examples(t, p)]
        test = tuple(e for p in test_p for e in pair_examples(t, p))
        dropped[t] = tuple(e for e in (*train, *val) if example_words(e) & banned)
        keep_train = tuple(e for e in train if not example_words(e) & banned)[: run_sizes.n_train]
        keep_val = tuple(e for e in val if not example_words(e) & banned)[: run_sizes.n_val]
        splits[t] = TaskSplits(get_task(t), keep_train, keep_val, test, SPLIT_SEED)
    forms = tuple({FORM_OF[f]: _spellings(p, f) for f in FORMS_FIELDS} for p in test_p)
    data = CompositionData(splits, frozenset(banned), dropped, forms)
    check_no_leak(data)
    return data


def check_no_leak(data: CompositionData, demo_pool: Sequence[Example] = ()) -> None:
    """Raises :class:`LeakError` naming the first training/validation example (or demonstration) that contains
    a word of a test query's pair."""
    test_words: set[str] = set()
    for e, f in zip(data.test, data.forms):
        test_words |= example_words(e)
        for spellings in f.values():
            for s in spellings:
                test_words |= words(s)
    if not test_words <= data.banned:
        raise LeakError(f"test words {sorted(test_words - data.banned)} are not banned")
    for task, splits in data.splits.items():
        for split, examples in (("train", splits.train), ("validation", splits.validation)):
            for e in examples:
                if example_words(e) & data.banned:
                    raise LeakError(f"{task} {split} example {e.input!r} -> {e.output!r} contains test words "
                                    f"{sorted(example_words(e) & data.banned)}")
    for e in demo_pool:
        if example_words(e) & data.banned:
            raise LeakError(f"demonstration {e.input!r} -> {e.output!r} contains test words")


# --------------------------------------------------------------------------------------------------------
# Vectors
# --------------------------------------------------------------------------------------------------------


def composition_ltv(
    lm: LoadedModel, task: str, run_sizes: RunSizes, data: CompositionData, *, seed: int = 0, progress: bool = False
) -> LearnedTaskVector:
    """The middle-layer, last-position LTV of ``task`` trained on the cleaned splits (cached by
    ``train_ltv(cache=True)``, keyed by the cleaned splits' examples: :func:`ltvlib.ltv.ltv_cache_key`)."""
    if task not in TASKS:
        raise ValueError(f"unknown composition task {task!r}; allowed: {', '.join(TASKS)}")
    check_no_leak(data)
    return train_ltv(lm, task, layers=[lm.middle_layer], recipe=run_sizes.recipe, seed=seed,
                     splits=data.splits[task], cache=True, progress=progress)


def composition_ltvs(
    lm: LoadedModel, run_sizes: RunSizes, data: CompositionData, seeds: Sequence[int], *, progress: bool = False
) -> dict[tuple[str, int], LearnedTaskVector]:
    """Every task's LTV for every seed, keyed ``(task, seed)``: the seeds of one task train together, as rows of
    one batch (``train_ltv(seeds=...)``), into the same cache entries :func:`composition_ltv` reads."""
    check_no_leak(data)
    out = {}
    for task in TASKS:
        vs = train_ltv(lm, task, layers=[lm.middle_layer], recipe=run_sizes.recipe, seeds=list(seeds),
                       splits=data.splits[task], cache=True, progress=progress)
        out.update({(task, s): v for s, v in zip(seeds, vs, strict=True)})
    return out


def combine(ltvs: Sequence[LearnedTaskVector], scales: Sequence[float]) -> list[VectorEdit]:
    """``sum_i scales[i] * ltvs[i]`` as one edit per site (all LTVs must sit at the same sites)."""
    if len(ltvs) != len(scales) or not ltvs:
        raise ValueError(f"need one scale per vector, got {len(scales)} scales for {len(ltvs)} vectors")
    sites = {(v.layers, v.positions) for v in ltvs}
    if len(sites) != 1:
        raise ValueError(f"vectors at different sites cannot be summed: {sorted(sites)}")
    # sum() starts from 0; ltvs is not empty, so the total is a tensor
    total = cast(torch.Tensor, sum(float(a) * v.vectors.float() for a, v in zip(scales, ltvs)))
    return [VectorEdit(e.layer, e.position, row) for e, row in zip(ltvs[0].edits(), total)]


# --------------------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------------------


class FormScorer:
    """The composed task's test queries as prompts (zero-shot, or ``shots`` composed demonstrations each).

    Args:
        lm: the model.
        data: :func:`composition_data`'s output.
        shots: demonstrations per prompt, drawn per query (seeded) from the cleaned composed training split.
        seed: seeds the demonstration draw.
    """

    def __init__(self, lm: LoadedModel, data: CompositionData, *, shots: int = 0, seed: int = 0) -> None:
        self.lm, self.data = lm, data
        self.task = get_task(COMPOSED)
        self.examples = list(data.test)
        pool = data.splits[COMPOSED].train
        demos = None
        if shots:
            check_no_leak(data, pool)
            rng = random.Random(f"composition-demos-{seed}")
            demos = [sample_demos(pool, shots, rng, exclude=e.input) for e in self.examples]
        self.prompts = encode_prompts(lm.tokenizer, self.task, self.examples, demos=demos)
        self.runner = PromptRunner(lm, self.prompts, tail=1, cache_rows=True)
        tok = lm.tokenizer
        self.gold_first = [ids[0] for ids in answer_ids(tok, self.task, [e.output for e in self.examples])]
        self.accepted_first = [
            {ids[0] for ids in answer_ids(tok, self.task, [e.output, *e.alternatives])} for e in self.examples
        ]
        # one teacher-forced row per (query, form, spelling)
        self._flat = [(i, form, ids) for i, f in enumerate(data.forms) for form in FORMS
                      for ids in answer_ids(tok, self.task, list(f[form]))]

    @torch.no_grad()
    def form_logprobs(self, edits: Sequence[VectorEdit] = (), *, batch_size: int = 128) -> dict[str, list[float]]:
        """Per form, per query: the highest total log-probability over the form's spellings as the answer.

        Every (query, form, spelling) is one row of a teacher-forced run; the rows of one query share its cached
        prompt prefix, so all forms cost about one batched pass over the answer tokens.
        """
        # the prompts' prefixes first, once per query (a batch with repeated rows would compute each repeat)
        self.runner.run(list(range(len(self.examples))), edits)
        return self._form_logprobs(edits, batch_size)

    def _form_logprobs(self, edits: Sequence[VectorEdit], batch_size: int) -> dict[str, list[float]]:
        out = {form: [float("-inf")] * len(self.examples) for form in FORMS}
        for start in range(0, len(self._flat), batch_size):
            chunk = self._flat[start : start + batch_size]
            answers = [ids for _, _, ids in chunk]
            logits, valid = self.runner.run([i for i, _, _ in chunk], edits, answers=answers)
            n = logits.shape[1]
            target = torch.tensor([a + [0] * (n - len(a)) for a in answers], device=logits.device)
            logp = logits.float().log_softmax(-1).gather(-1, target[..., None])[..., 0]
            for (i, form, _), v in zip(chunk, (logp * valid).sum(-1).tolist()):
                out[form][i] = max(out[form][i], v)
        return out

    @torch.no_grad()
    def score(self, edits: Sequence[VectorEdit] = ()) -> dict[str, Any]:
        """Scores of the prompts with ``edits`` injected (see the module docstring).

        Returns:
            ``{"correct": [0/1 per query], "french_fem": [0/1 per query: the French feminine is the most probable
            form], "accuracy", "accepted_accuracy", "form_choice": {form: share}, "n", "predicted": [top-1 token
            per query], "chosen": [form per query]}``.
        """
        logits, _ = self.runner.run(list(range(len(self.examples))), edits)  # also caches every prompt's prefix
        top = logits[:, -1].float().argmax(-1).tolist()
        n = len(top)
        lp = self._form_logprobs(edits, 128)
        chosen = []
        for i in range(n):
            # identical strings get identical scores; the first form in FORMS wins the tie
            best = max(FORMS, key=lambda f: (lp[f][i], -FORMS.index(f)))
            chosen.append(best)
        return {
            "correct": [float(t == g) for t, g in zip(top, self.gold_first)],
            "french_fem": [float(c == "french_fem") for c in chosen],
            "accuracy": sum(t == g for t, g in zip(top, self.gold_first)) / n,
            "accepted_accuracy": sum(t in a for t, a in zip(top, self.accepted_first)) / n,
            "form_choice": {f: chosen.count(f) / n for f in FORMS},
            "n": n,
            "predicted": [self.lm.tokenizer.decode([t]) for t in top],
            "chosen": chosen,
        }


def first_token_clashes(lm: LoadedModel, data: CompositionData) -> list[dict[str, str]]:
    """Test queries whose gold French feminine starts with the same token as another form of the pair (the
    book's first-token metric cannot tell those forms apart)."""
    task, tok = get_task(COMPOSED), lm.tokenizer
    out = []
    for e, f in zip(data.test, data.forms):
        gold = answer_ids(tok, task, [e.output])[0][0]
        for form in FORMS[1:]:
            firsts = {ids[0] for ids in answer_ids(tok, task, list(f[form]))}
            if gold in firsts:
                out.append({"query": e.input, "gold": e.output, "form": form, "other": f[form][0],
                            "token": tok.decode([gold])})
    return out


# --------------------------------------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------------------------------------


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().flatten(), b.double().flatten()
    return float(a @ b / (a.norm() * b.norm()).clamp_min(1e-12))


def composition_result(
    lm: LoadedModel, run_sizes: RunSizes, sizes: CompositionSizes, *, seed: int = 0, progress: bool = False
) -> dict[str, Any]:
    """Every method on the composed task's test queries, for one seed (cached).

    Methods: ``zero-shot``; ``{k}-shot ICL`` (composed demonstrations); ``EN->FR`` and ``M->F`` (each component
    LTV alone); ``EN->FR + M->F`` (their sum); ``random (norm of the sum)`` (the control: a random vector with
    the sum's norm at the same site, :func:`ltvlib.analysis.controls.random_like` seeded by ``7919 + seed``);
    ``composed LTV`` (trained directly on the composed task, the upper reference). ``grid`` holds ``a * EN->FR + b * M->F`` for every pair of ``sizes.scales``.

    Returns:
        ``{"methods": {name: FormScorer.score(...)}, "grid": [{"a", "b", **score}], "vectors": {task: {norm,
        steps, val_accuracy, n_train, n_val}}, "cosine": {"vectors" | "vector minus start": {pair: cos}},
        "seed"}``. The three LTVs of one seed start from the same random vector (the seed fixes it), so
        ``"vector minus start"`` compares what training added.
    """
    data = composition_data(run_sizes, test_pairs=sizes.test_pairs)
    key = {"what": "composition", "model": lm.name, "seed": seed, "sizes": asdict(sizes),
           "recipe": asdict(run_sizes.recipe), "data": {t: data.fingerprint(t) for t in TASKS},
           "layer": lm.middle_layer, "source": dependency_hash(__name__)}

    def compute() -> dict[str, Any]:
        # every seed's vectors train together (one batch per step), then each seed's are read back from the cache
        composition_ltvs(lm, run_sizes, data, sizes.seeds if seed in sizes.seeds else (seed,), progress=progress)
        ltvs = {t: composition_ltv(lm, t, run_sizes, data, seed=seed, progress=progress) for t in TASKS}
        zs = FormScorer(lm, data)
        methods: dict[str, Any] = {"zero-shot": zs.score()}
        for k in sizes.icl_shots:
            methods[f"{k}-shot ICL"] = FormScorer(lm, data, shots=k, seed=seed).score()
        enfr, mf, comp = ltvs[EN_FR], ltvs[MASC_FEM], ltvs[COMPOSED]
        methods["EN->FR"] = zs.score(enfr.edits())
        methods["M->F"] = zs.score(mf.edits())
        summed = combine([enfr, mf], [1.0, 1.0])
        methods["EN->FR + M->F"] = zs.score(summed)
        noise = random_like(torch.stack([e.vector for e in summed]), 1, RANDOM_SEED_BASE + seed)[0]
        methods["random (norm of the sum)"] = zs.score([VectorEdit(e.layer, e.position, row)
                                                        for e, row in zip(summed, noise)])
        methods["composed LTV"] = zs.score(comp.edits())
        grid = [{"a": a, "b": b, **zs.score(combine([enfr, mf], [a, b]))} for a in sizes.scales for b in sizes.scales]
        v = {t: ltvs[t].vectors[0].float() for t in TASKS}
        # the three vectors of one seed start from the same random vector: compare what training added too
        d = {t: v[t] - initial_vectors(ltvs[t])[0] for t in TASKS}
        return {
            "seed": seed,
            "methods": methods,
            "grid": grid,
            "vectors": {t: {"norm": float(v[t].norm()), "steps": ltvs[t].training.steps,
                            "val_accuracy": ltvs[t].training.best_val_accuracy,
                            "trained": ltvs[t].training.trained,
                            "n_train": len(data.splits[t].train), "n_val": len(data.splits[t].validation)}
                        for t in TASKS},
            "cosine": {kind: {"composed, EN->FR + M->F": _cos(x[COMPOSED], x[EN_FR] + x[MASC_FEM]),
                              "composed, EN->FR": _cos(x[COMPOSED], x[EN_FR]),
                              "composed, M->F": _cos(x[COMPOSED], x[MASC_FEM]),
                              "EN->FR, M->F": _cos(x[EN_FR], x[MASC_FEM])}
                       for kind, x in (("vectors", v), ("vector minus start", d))},
        }

    return cached_json("composition", key, compute)
