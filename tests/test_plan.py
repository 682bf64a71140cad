"""The cost plan (``python -m ltvlib.book plan``) against what torch counts: the FLOPs that
:func:`ltvlib.study.cost.ltv_training_cost` and :func:`~ltvlib.study.cost.eval_cost` estimate from a model's
config and its prompts' lengths lie within 10 % of ``torch.utils.flop_counter.FlopCounterMode``'s count of the
same work (the CPU attention kernel included, as ``bench/floor.py`` counts it); and the command itself runs from
a config alone."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from arch_fixtures import tiny_qwen2
from models_fixtures import tiny_gemma3, tiny_llama

from ltvlib import prompt_store
from ltvlib.evaluate import EvalSet, evaluate
from ltvlib.flops import Shape, model_shape, shape_from_config
from ltvlib.inject import VectorEdit
from ltvlib.ltv import FAST_RECIPE, PAPER_RECIPE, train_ltv, with_config
from ltvlib.study.cost import Lengths, chapter_costs, eval_cost, ltv_training_cost, tokenizer_counter
from ltvlib.tasks import get_task, load_splits
from tests.bench_scripts import load_bench

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 0.10
BUILDERS = {"llama": tiny_llama, "gemma3": tiny_gemma3, "qwen2": tiny_qwen2}


def _counted(fn) -> tuple[int, object]:
    total, _, result = load_bench("floor").counted_flops(fn)
    return total, result


def _shape(lm) -> Shape:
    return shape_from_config(lm.model.config, lm.name)


def _lengths(lm, task: str, examples) -> Lengths:
    count, special = tokenizer_counter(lm.tokenizer)
    return Lengths.of(get_task(task), list(examples), count, special)


def _check(estimate: float, measured: int, what: str = "") -> None:
    label = f"{what}: " if what else ""
    assert measured > 0, what
    print(f"{label}estimate / measured = {estimate / measured:.3f} ({estimate:.4g} / {measured:.4g} FLOPs)")
    assert abs(estimate / measured - 1) <= TOLERANCE, f"{label}estimate {estimate:.4g} vs measured {measured:.4g} FLOPs"


def _train_and_estimate(lm, task: str, recipe, *, layer: int, n_train: int, n_val: int,
                        lengths: Lengths | None = None, positions: tuple[int, ...] = (-1,)) -> tuple[float, int]:
    """One LTV trained from an emptied prompt store under the counter, and the plan's estimate of it with the
    steps, validations and attempts the run made (every attempt runs its whole schedule: see the recipes)."""
    splits = load_splits(task, seed=0, n_train=n_train, n_val=n_val)
    prompt_store.STORE.clear()
    measured, ltv = _counted(lambda: train_ltv(lm, task, layers=[layer], positions=list(positions), recipe=recipe,
                                               seed=0, splits=splits, progress=False))
    rec = ltv.training  # type: ignore[attr-defined]
    validations = sum(1 for point in rec.curve if "val_score" in point)
    assert rec.steps == recipe.epochs * -(-recipe.samples_per_epoch // recipe.batch_size)  # no early stop
    estimate = ltv_training_cost(_shape(lm), lengths or _lengths(lm, task, splits.train), layer, recipe,
                                 n_train=len(splits.train), n_val=len(splits.validation), steps=rec.steps,
                                 validations=validations, attempts=rec.attempts, positions=positions)
    return estimate.flops, measured


# patience 2 over 2 epochs: no run stops early, so each attempt runs its whole schedule
FAST_SMALL = with_config(FAST_RECIPE, epochs=2, samples_per_epoch=32)
PAPER_SMALL = with_config(PAPER_RECIPE, epochs=2, samples_per_epoch=6)


@pytest.mark.parametrize("arch", sorted(BUILDERS))
@pytest.mark.parametrize("layer", [0, 2])
def test_fast_recipe_training_estimate_matches_the_counted_flops(arch, layer, tmp_path, monkeypatch):
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))  # the stream's size is computed, not read from a cache
    # weights of their own: the stream's size is memoised per process by the weights it was measured on
    lm = BUILDERS[arch](seed=10 + layer)
    estimate, measured = _train_and_estimate(lm, "antonym", FAST_SMALL, layer=layer, n_train=64, n_val=32)
    _check(estimate, measured)


@pytest.mark.parametrize("positions", [(4,), (-3, -2, -1)])
def test_training_at_other_positions_is_counted_from_the_earliest_one(positions, tmp_path, monkeypatch):
    """A vector at a position counted from the start (the paper's P={4}) or at the last few positions: every step
    and validation recomputes each prompt from that position on, which the estimate counts per row."""
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    lm = tiny_llama(seed=40 + len(positions))
    estimate, measured = _train_and_estimate(lm, "antonym", FAST_SMALL, layer=1, n_train=64, n_val=32,
                                             positions=positions)
    _check(estimate, measured)
    last = ltv_training_cost(_shape(lm), _lengths(lm, "antonym", load_splits("antonym", n_train=64, n_val=32).train),
                             1, FAST_SMALL, n_train=64, n_val=32)
    assert estimate > last.flops


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_paper_recipe_training_estimate_matches_the_counted_flops(arch, tmp_path, monkeypatch):
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    lm = BUILDERS[arch](seed=20)
    estimate, measured = _train_and_estimate(lm, "antonym", PAPER_SMALL, layer=1, n_train=32, n_val=16)
    _check(estimate, measured)


def test_retries_are_counted_per_attempt(tmp_path, monkeypatch):
    """A random tiny model never learns: every run is retried twice, and the estimate counts three attempts."""
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    lm = tiny_llama(seed=30)
    recipe = with_config(FAST_SMALL, retries_without_progress=2)
    splits = load_splits("antonym", seed=0, n_train=64, n_val=32)
    prompt_store.STORE.clear()
    measured, ltv = _counted(lambda: train_ltv(lm, "antonym", layers=[1], recipe=recipe, seed=0, splits=splits,
                                               progress=False))
    assert ltv.training.attempts == 3  # type: ignore[attr-defined]
    lengths = _lengths(lm, "antonym", splits.train)
    once = ltv_training_cost(_shape(lm), lengths, 1, recipe, n_train=64, n_val=32)
    thrice = ltv_training_cost(_shape(lm), lengths, 1, recipe, n_train=64, n_val=32, attempts=3)
    _check(thrice.flops, measured)
    assert thrice.flops > 1.5 * once.flops


@pytest.mark.parametrize("shots", [0, 3])
def test_evaluation_estimate_matches_the_counted_flops(shots):
    """The test prompts once in full, then two vectors at layer 1 (last position)."""
    lm = tiny_llama()
    splits = load_splits("antonym", seed=0, n_train=64, n_val=8)
    test = list(splits.test)[:48]
    vectors = [VectorEdit(1, -1, 0.1 * lm.model.get_input_embeddings().weight[i].detach()) for i in (5, 6)]

    def run() -> list:
        # built inside the count: a set computes its shared demonstration blocks when it is made
        eval_set = EvalSet(lm, get_task("antonym"), test, shots=shots, demo_pool=list(splits.train), seed=0,
                           demo_sets=4 if shots else None, tail=1, first_layer=1)
        return [evaluate(eval_set, [v]) for v in vectors]

    measured, _ = _counted(run)
    lengths = _lengths(lm, "antonym", test)
    estimate = eval_cost(_shape(lm), lengths, len(test), 1, len(vectors), shots=shots, demo_sets=4 if shots else None)
    _check(estimate.flops, measured)


def test_shapes_from_configs():
    assert model_shape("llama-8b").n_params == pytest.approx(8.03e9, rel=0.01)
    assert model_shape("32b").n_params == pytest.approx(32.8e9, rel=0.02)  # Qwen2.5-32B
    assert model_shape("70b").n_params == pytest.approx(70.6e9, rel=0.01)
    smol = model_shape("smollm2-135m")
    assert (smol.n_layers, smol.d_model, smol.vocab, smol.tied) == (30, 576, 49152, True)
    assert smol.n_params == pytest.approx(134.5e6, rel=0.01)
    with pytest.raises(ValueError, match="no config for 'no-such/model'"):
        model_shape("no-such/model")


def test_every_chapter_has_a_cost_and_a_larger_model_costs_more():
    small = chapter_costs(model_shape("smollm2-135m"), "smoke")
    large = chapter_costs(model_shape("llama-8b"), "smoke")
    assert list(small) == ["00", "01", "02", "03", "04", "05", "06", "07", "08"]
    assert all(c.flops > 0 and c.fwd_tokens > 0 for c in small.values())
    assert all(large[k].flops > 10 * small[k].flops for k in small)


def test_plan_command_prints_the_table_from_the_config_alone():
    """``python -m ltvlib.book plan`` on a shape no weights exist for: the table, one row per chapter."""
    out = subprocess.run([sys.executable, "-m", "ltvlib.book", "plan", "--model", "70b", "--profile", "smoke",
                          "--gpu", "H100", "--utilisation", "0.4"], check=False, capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "model llama-3-70b: 70.55 B parameters" in out.stdout
    assert "at 40% of peak = 396 TFLOP/s" in out.stdout
    rows = [line for line in out.stdout.splitlines() if line.startswith(("| 0", "| book"))]
    assert [r.split("|")[1].strip() for r in rows] == ["00", "01", "02", "03", "04", "05", "06", "07", "08", "book"]
    bad = subprocess.run([sys.executable, "-m", "ltvlib.book", "plan", "--utilisation", "1.5"], check=False,
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode == 2 and "--utilisation must lie in (0, 1], got 1.5" in bad.stderr


@pytest.mark.realmodel
def test_smollm2_training_estimate_matches_the_counted_flops(tmp_path, monkeypatch):
    """One small LTV on SmolLM2-135M (fast recipe, 64 training and 32 validation prompts, 4 steps of 16) against
    the plan's estimate with the plan's own prompt lengths (the task's first 200 training examples)."""
    from ltvlib.models import load_model
    from ltvlib.study.cost import task_lengths, tokenizer_file

    lm = load_model("smollm2-135m", device="cpu")
    tokenizer = tokenizer_file("smollm2-135m")
    assert tokenizer is not None and tokenizer.parent.name == "smollm2-135m"
    lengths = task_lengths("antonym", tokenizer)
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    estimate, measured = _train_and_estimate(lm, "antonym", FAST_SMALL, layer=lm.middle_layer, n_train=64,
                                             n_val=32, lengths=lengths)
    _check(estimate, measured)


def test_a_second_model_pays_for_what_earlier_chapters_cached_on_the_first():
    """Chapter 08 on the book's model reads chapter 01's extractions and chapter 00's prompts from the cache; on a
    second model it computes them, so its row counts more; and the race counts the every-layer prefix it runs."""
    from ltvlib.study.cost import race_field, second_model_floor

    on_book_model = chapter_costs(model_shape("smollm2-135m"), "smoke")["08"]
    assert second_model_floor("smollm2-135m", "smoke").flops > on_book_model.flops
    assert race_field("cpu", 15)["prefix-1"] == ("prefix", 0, 0)
    from ltvlib.study.cost import RACE_GRID
    from ltvlib.study.peft_compare import LR_GRID

    assert RACE_GRID == len(LR_GRID)  # the plan prices the grid the race trains
    assert "prefix-1" not in race_field("smoke", 15)


def test_plan_counts_the_late_layers_and_the_tails_of_chapter_02():
    """Chapter 02 at position 4 recomputes each prompt from its fifth token: the chapter costs more than the
    same LTVs at the last position would."""
    from ltvlib.study import cost

    shape = model_shape("smollm2-135m")
    counted = chapter_costs(shape, "smoke")["02"].flops
    original = cost.Lengths.tails
    try:
        cost.Lengths.tails = lambda self, positions=(-1,), shots=0: tuple(1 for _ in self.queries)  # type: ignore[method-assign]
        last_only = chapter_costs(shape, "smoke")["02"].flops
    finally:
        cost.Lengths.tails = original  # type: ignore[method-assign]
    assert counted > last_only


def test_extraction_estimates_match_the_counted_flops():
    """Both extracted vectors of chapter 01 on the tiny model: the Vanilla TV (its prompts, then its layer chosen
    among three) and the function vector (mean head outputs, then every head's indirect effect)."""
    from ltvlib.baselines.function_vector import FunctionVectorConfig, extract_function_vector
    from ltvlib.baselines.vanilla_tv import VanillaTVConfig, extract_vanilla_tv, select_layer
    from ltvlib.study.cost import function_vector_cost, vanilla_tv_cost

    lm = tiny_llama()
    splits = load_splits("antonym", seed=0, n_train=64, n_val=16)
    pool = list(splits.train)
    lengths = _lengths(lm, "antonym", pool)
    tv_config = VanillaTVConfig(shots=3, n_contexts=6, template="task", n_dev=12)
    measured, _ = _counted(lambda: select_layer(lm, extract_vanilla_tv(lm, "antonym", pool, tv_config),
                                                list(splits.validation), layers=[0, 1, 2]))
    _check(vanilla_tv_cost(_shape(lm), lengths, tv_config, [0, 1, 2]).flops, measured)
    fv_config = FunctionVectorConfig(shots=3, n_mean=8, n_ie=4, k=2)
    measured, _ = _counted(lambda: extract_function_vector(lm, "antonym", pool, fv_config))
    _check(function_vector_cost(_shape(lm), lengths, fv_config).flops, measured)


def test_a_chapters_prompt_passes_are_counted_per_tail_block_and_kernel(tmp_path, monkeypatch):
    """A chapter's LTVs in the order it trains them, each counted on its own: the prompts' first passes are paid
    again for a new tail and for an earlier block than the store keeps, not for a later block; the stream RMS once
    per task and positions; a new chapter (an emptied store) pays the passes again but not the RMS (on disk)."""
    from types import SimpleNamespace

    from ltvlib.flops import Cost
    from ltvlib.study.cost import LTVCounter

    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    lm = tiny_llama(seed=50)
    recipe = with_config(FAST_SMALL, retries_without_progress=0)
    splits = load_splits("antonym", seed=0, n_train=64, n_val=32)
    lengths = _lengths(lm, "antonym", splits.train)
    counter = LTVCounter(_shape(lm), lambda task: lengths, SimpleNamespace(recipe=recipe, n_train=64, n_val=32))
    prompt_store.STORE.clear()
    estimates = {}
    for name, layer, positions, seed in (("first", 1, (-1,), 0), ("new tail", 1, (4,), 0),
                                         ("earlier block", 0, (-1,), 0), ("later block", 2, (-1,), 0),
                                         ("new chapter", 2, (-1,), 1)):
        if name == "new chapter":
            prompt_store.STORE.clear()
            counter.new_chapter()
        measured, _ = _counted(lambda layer=layer, positions=positions, seed=seed: train_ltv(
            lm, "antonym", layers=[layer], positions=list(positions), recipe=recipe, seed=seed, splits=splits,
            progress=False))
        c = Cost()
        counter(c, "antonym", layer, seed, positions=positions)
        _check(c.flops, measured, name)
        estimates[name] = c.flops
    # the passes the rules add are a visible share of these runs: a count that skipped them would fail above
    assert estimates["earlier block"] > 1.3 * estimates["later block"]
    assert estimates["new chapter"] > 1.3 * estimates["later block"]


def test_a_small_task_is_counted_with_the_queries_its_split_holds(tmp_path, monkeypatch):
    """Capital's default split holds 98 training and 49 validation queries where 600 and 200 are asked for: the
    count follows what runs, not what was asked for (and its 50 test queries cap an evaluation of 200)."""
    from types import SimpleNamespace

    from ltvlib.flops import Cost
    from ltvlib.study.cost import LTVCounter, split_sizes

    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    lm = tiny_llama(seed=60)
    recipe = with_config(FAST_SMALL, retries_without_progress=0)
    train, val, test = split_sizes("capital", 600, 200)
    assert (train, val) == (98, 49) and test < 200
    splits = load_splits("capital", seed=0, n_train=600, n_val=200)
    lengths = _lengths(lm, "capital", splits.train)
    prompt_store.STORE.clear()
    measured, _ = _counted(lambda: train_ltv(lm, "capital", layers=[1], recipe=recipe, seed=0, n_train=600, n_val=200,
                                             progress=False))
    c = Cost()
    LTVCounter(_shape(lm), lambda task: lengths, SimpleNamespace(recipe=recipe, n_train=600, n_val=200))(c, "capital", 1, 0)
    _check(c.flops, measured, "capital at 600 and 200 asked for")
    capped = dataclasses.replace(lengths, test_size=test)
    assert eval_cost(_shape(lm), capped, 200, 1, 2).flops == eval_cost(_shape(lm), lengths, test, 1, 2).flops
