"""LTV training: both recipes lower the loss, the default at the first and the last layer alike; step sizes follow
the stream; a result says whether it trained; seeds are reproducible, results round-trip, errors are loud."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from ltvlib.evaluate import EvalSet, evaluate
from ltvlib.ltv import (
    FAST_RECIPE,
    FAST_REFERENCE_LAST_MEDIAN,
    FAST_REFERENCE_LAST_RMS,
    FAST_REFERENCE_MEDIAN,
    FAST_REFERENCE_RMS,
    PAPER_RECIPE,
    LearnedTaskVector,
    TrainConfig,
    TrainingDivergedError,
    absolute_recipe,
    ltv_cache_path,
    step_scales,
    train_ltv,
    validation_metric,
    with_config,
)
from ltvlib.ltv_record import TrainingRecord
from ltvlib.tasks import load_splits

SMALL = {"n_train": 48, "n_val": 16}


def _splits(task="antonym"):
    return load_splits(task, **SMALL)


def _first_loss(ltv: LearnedTaskVector, k: int = 3) -> float:
    losses = [c["loss"] for c in ltv.training.curve if "loss" in c]
    return sum(losses[:k]) / k


def _last_loss(ltv: LearnedTaskVector, k: int = 3) -> float:
    losses = [c["loss"] for c in ltv.training.curve if "loss" in c]
    return sum(losses[-k:]) / k


@pytest.mark.parametrize(
    "config",
    [
        with_config(PAPER_RECIPE, epochs=2, samples_per_epoch=24, patience=5, lr=5e-2),
        # relative lr 3 x the tiny stream's RMS (about 0.02-0.03 at its last layer): about the absolute 5e-2 of the paper case;
        # no retries, so the curve is the run at that lr (not a retry's at lr / 3 or lr / 9), like the paper case's
        with_config(FAST_RECIPE, epochs=4, samples_per_epoch=32, batch_size=8, patience=5, lr=3.0,
                    retries_without_progress=0),
    ],
    ids=["paper", "fast"],
)
def test_recipes_lower_the_loss(tiny, config):
    ltv = train_ltv(tiny, "antonym", layers=[1], recipe=config, splits=_splits(), progress=False)
    assert ltv.training.steps == config.epochs * -(-config.samples_per_epoch // config.batch_size)
    assert _last_loss(ltv) < _first_loss(ltv)
    assert ltv.vectors.shape == (1, tiny.d_model)


def test_several_layers_and_positions_and_shots(llama):
    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=16, batch_size=8, demo_sets=2)
    ltv = train_ltv(llama, "antonym", layers=[0, 2], positions=[-2, -1], shots=2, recipe=config,
                    splits=_splits(), progress=False)
    assert ltv.vectors.shape == (4, llama.d_model)
    assert [(e.layer, e.position) for e in ltv.edits()] == [(0, -2), (0, -1), (2, -2), (2, -1)]


def test_same_seed_same_vector_other_seed_other_vector(llama):
    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=16, batch_size=8)
    a = train_ltv(llama, "antonym", layers=[1], recipe=config, seed=3, splits=_splits(), progress=False)
    b = train_ltv(llama, "antonym", layers=[1], recipe=config, seed=3, splits=_splits(), progress=False)
    c = train_ltv(llama, "antonym", layers=[1], recipe=config, seed=4, splits=_splits(), progress=False)
    assert torch.equal(a.vectors, b.vectors)
    assert not torch.equal(a.vectors, c.vectors)


def test_save_load_round_trip(llama, tmp_path):
    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=8)
    ltv = train_ltv(llama, "antonym", layers=[2], recipe=config, splits=_splits(), progress=False)
    path = ltv.save(tmp_path / "v.safetensors")
    back = LearnedTaskVector.load(path)
    assert torch.equal(back.vectors, ltv.vectors)
    assert back.metadata() == ltv.metadata()
    t, b = ltv.training, back.training
    assert b.trained is t.trained is not None and b.steps_to_best == t.steps_to_best
    assert b.start_val_accuracy == t.start_val_accuracy and b.stream_rms == t.stream_rms
    assert b.effective_lr == t.effective_lr and back.config == ltv.config
    assert isinstance(b, TrainingRecord) and isinstance(b.effective_lr, tuple)
    # the loaded vector evaluates like the original
    es = EvalSet(llama, "antonym", _splits().test[:8])
    assert evaluate(es, back.edits()).correct == evaluate(es, ltv.edits()).correct


def test_nan_loss_stops_with_clear_error(llama):
    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=8, init_range=float("inf"))
    with pytest.raises(TrainingDivergedError, match="diverged at step 0: loss=nan"):
        train_ltv(llama, "antonym", layers=[1], recipe=config, splits=_splits(), progress=False)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"layers": [9]}, "layer 9 is out of range"),
        ({"positions": [-99]}, "position -99 is outside the prompt"),
        ({"recipe": "slow"}, "unknown recipe 'slow'"),
    ],
)
def test_bad_arguments_name_the_value(llama, kwargs, match):
    with pytest.raises(ValueError, match=match):
        train_ltv(llama, "antonym", splits=_splits(), progress=False, **kwargs)


def test_unknown_task(llama):
    with pytest.raises(ValueError, match="unknown task 'antonyms'"):
        train_ltv(llama, "antonyms", progress=False)



@pytest.fixture
def trainings(monkeypatch, tmp_path):
    """An empty on-disk cache, and the trainings train_ltv starts (a cache hit starts none)."""
    from ltvlib import ltv as ltv_module

    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path / "cache"))
    calls: list[str] = []
    real = ltv_module._train_runs

    def counting(lm, specs, **kwargs):
        calls.extend(spec.task.name for spec in specs)
        return real(lm, specs, **kwargs)

    monkeypatch.setattr(ltv_module, "_train_runs", counting)
    return calls


CACHED = {"layers": [1], "recipe": with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=8),
          "n_train": 16, "n_val": 8, "progress": False}


def test_cache_writes_then_reads(llama, trainings, tmp_path):
    first = train_ltv(llama, "antonym", cache=True, **CACHED)
    files = list((tmp_path / "cache" / "vectors" / "ltv").glob("*.safetensors"))
    assert trainings == ["antonym"] and len(files) == 1
    again = train_ltv(llama, "antonym", cache=True, **CACHED)
    assert trainings == ["antonym"]  # read back, not trained
    assert torch.equal(again.vectors, first.vectors) and again.metadata() == first.metadata()
    # without the cache: trained afresh on the same default splits (n_train, n_val), the same vector
    plain = train_ltv(llama, "antonym", **CACHED)
    assert trainings == ["antonym", "antonym"] and torch.equal(plain.vectors, first.vectors)
    # splits of the caller's own are keyed by their examples: another entry, read back the same way
    own = {k: v for k, v in CACHED.items() if k not in ("n_train", "n_val")}
    train_ltv(llama, "antonym", cache=True, splits=_splits(), **own)
    train_ltv(llama, "antonym", cache=True, splits=_splits(), **own)
    assert trainings == ["antonym"] * 3 and len(list(files[0].parent.glob("*.safetensors"))) == 2


def test_cached_seeds_train_only_the_missing_ones_and_a_damaged_file_is_retrained(llama, trainings, tmp_path, caplog):
    first = train_ltv(llama, "antonym", cache=True, seed=1, **CACHED)
    both = train_ltv(llama, "antonym", cache=True, seeds=[1, 2], **CACHED)
    assert trainings == ["antonym", "antonym"]  # seed 2 only
    assert [b.seed for b in both] == [1, 2] and torch.equal(both[0].vectors, first.vectors)
    path = ltv_cache_path(llama.name, "antonym", layers=[1], seed=2, recipe=CACHED["recipe"], n_train=16, n_val=8)
    path.write_bytes(path.read_bytes()[:100])
    again = train_ltv(llama, "antonym", cache=True, seed=2, **CACHED)
    assert trainings == ["antonym"] * 3 and torch.equal(again.vectors, both[1].vectors)
    assert "damaged entry" in caplog.text


def test_cached_ltv_is_a_deprecated_alias(llama, trainings):
    from ltvlib.ltv import cached_ltv

    first = train_ltv(llama, "antonym", cache=True, **CACHED)
    with pytest.warns(DeprecationWarning, match="train_ltv"):
        alias = cached_ltv(llama, "antonym", **CACHED)
    assert trainings == ["antonym"]  # the same cache entry
    assert torch.equal(alias.vectors, first.vectors)

def test_k_shot_queries_keep_one_block_that_never_shows_them(llama):
    """With k-shot training each query always uses the same demonstration block (so its own prefix is cached
    once), and no block contains its own queries."""
    from ltvlib.ltv import _training_prompts
    from ltvlib.tasks import get_task

    task, train = get_task("antonym"), list(_splits().train)
    data = _training_prompts(llama, task, train, shots=3, n_sets=4, tail=1, seed=0, first_layer=0)
    assert sorted(i for g in data.groups for i in g) == list(range(len(train)))
    from ltvlib.prompts import encode_prompts

    queries = encode_prompts(llama.tokenizer, task, train).rows  # each query's own tokens, "Q: x\nA:"

    def contains(seq: list[int], part: list[int]) -> bool:
        return any(seq[j : j + len(part)] == part for j in range(len(seq) - len(part) + 1))

    for s, group in enumerate(data.groups):
        assert len(data.runners[s]) == len(group)
        shared = list(data.runners[s].prompts.shared)
        shown = [i for i, q in enumerate(queries) if contains(shared, list(q))]
        assert len(shown) == 3  # the check below can see the demonstrations
        assert not set(shown) & set(group)


# ---------------------------------------------------------------------------------------------------------------
# Steps relative to the stream; whether a result trained


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch, tmp_path):
    """Stream RMS measurements go to a fresh cache (never the user's, never the repository)."""
    from ltvlib import stream_scale

    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(stream_scale, "_MEMORY", {})


def _full_batch_default(n_train: int) -> TrainConfig:
    """The default recipe (relative lr and init, 64 steps, AdamW, linear decay) with every step on the whole
    training split, so the curve's losses are all on the same batch and comparable step to step. No retries:
    the curve is the run at the recipe's own step size (with retries, a run that does not beat its starting
    validation score, as on a random tiny model, is run again at a third and a ninth of it, and the curve kept
    would be the last of those three; the retries are test_a_run_that_did_not_train_is_retried_...'s)."""
    return with_config(FAST_RECIPE, batch_size=n_train, samples_per_epoch=8 * n_train, retries_without_progress=0)


@pytest.mark.parametrize("where", ["first", "last"])
def test_default_recipe_lowers_the_loss_at_the_first_and_the_last_layer(tiny, where):
    layer = 0 if where == "first" else tiny.n_layers - 1
    splits = _splits()
    config = _full_batch_default(len(splits.train))
    ltv = train_ltv(tiny, "antonym", layers=[layer], recipe=config, splits=splits, progress=False)
    losses = [c["loss"] for c in ltv.training.curve if "loss" in c]
    assert len(losses) == 64
    # the first loss is the starting vector's, the last one after 63 relative steps, on the same 48 queries;
    # float noise of the same batch in another order is ~1e-6
    assert losses[-1] < losses[0] - 1e-2
    assert all(b <= a + 1e-4 for a, b in itertools.pairwise(losses))  # full-batch descent, nearly monotone


@pytest.mark.parametrize("statistic", ["rms", "median"])
@pytest.mark.parametrize("weight", [0.0, 0.5, 1.0])
def test_effective_steps_are_the_relative_ones_times_the_stream_rms(llama, weight, statistic):
    """The initial range follows the site's stream RMS; the learning rate ``s_site ** (1 - w) * s_last ** w``,
    ``s_last`` the stream entering the last block at the same position, ``s`` its RMS or its typical coordinate
    (the median over coordinates of each one's RMS over prompts), hand-computed from a recorded forward."""
    from ltvlib.inject import record_residual
    from ltvlib.prompts import encode_prompts, pad_left

    splits = _splits()
    # no steps: no retries at lr / 3
    config = with_config(FAST_RECIPE, epochs=0, retries_without_progress=0, lr_final_stream_weight=weight,
                         lr_stream_statistic=statistic)
    ltv = train_ltv(llama, "antonym", layers=[0, 2], positions=[-2, -1], recipe=config, splits=splits, progress=False)
    rows = encode_prompts(llama.tokenizer, splits.task, splits.train[:32]).full_rows()
    ids, mask = pad_left(rows, llama.tokenizer.pad_token_id)
    top = llama.n_layers - 1
    with torch.no_grad(), record_residual(llama, [0, 2, top]) as rec:
        llama.model(input_ids=ids, attention_mask=mask)
    last = mask.shape[1] - 1  # left padding: the last token is the last column, the one before it the one before

    def rms(layer: int, col: int) -> float:
        return float(rec[layer][:, col].double().pow(2).mean().sqrt())

    def size(layer: int, col: int) -> float:
        if statistic == "rms":
            return rms(layer, col)
        return float(rec[layer][:, col].double().pow(2).mean(0).sqrt().median())

    expected = [rms(l, c) for l in (0, 2) for c in (last - 1, last)]
    site = [size(l, c) for l in (0, 2) for c in (last - 1, last)]
    final = [size(top, c) for _ in (0, 2) for c in (last - 1, last)]
    assert final[0] != pytest.approx(site[0], rel=0.05)  # the two streams differ, so the blend is tested
    if statistic == "median":
        assert site[0] != pytest.approx(expected[0], rel=0.05)  # ... and so does the statistic
    assert ltv.training.stream_rms == pytest.approx(expected, rel=1e-6)
    blend = [s ** (1 - weight) * t ** weight for s, t in zip(site, final)]
    # four vectors share the step: each takes a quarter (lr_vector_count_exponent=1)
    assert ltv.training.effective_lr == pytest.approx([FAST_RECIPE.lr * b / 4 for b in blend], rel=1e-6)
    assert ltv.training.effective_init == pytest.approx([FAST_RECIPE.init_range * r for r in expected], rel=1e-12)
    # each row starts inside its own site's range
    for row, init in zip(ltv.vectors, ltv.training.effective_init):
        assert float(row.abs().max()) <= init


def test_the_default_learning_rate_is_the_same_at_every_layer(llama):
    """``lr_final_stream_weight=1``: one absolute step per model and position, whatever the layer."""
    splits = _splits()
    scales = step_scales(FAST_RECIPE, llama, splits.task, splits.train, list(range(llama.n_layers)), [-1])
    assert len(set(scales)) == 1
    site = step_scales(with_config(FAST_RECIPE, lr_final_stream_weight=0.0), llama, splits.task, splits.train,
                       list(range(llama.n_layers)), [-1])
    assert site[-1] == scales[0] and len(set(site)) == llama.n_layers  # the last layer's own stream


@pytest.mark.parametrize("weight", [-0.1, 1.5, float("nan")])
def test_a_final_stream_weight_outside_0_1_names_the_value(weight):
    with pytest.raises(ValueError, match="lr_final_stream_weight"):
        with_config(FAST_RECIPE, lr_final_stream_weight=weight)


@pytest.mark.parametrize("exponent", [0.0, 0.5, 1.0])
def test_vectors_trained_together_share_the_learning_rate(llama, exponent):
    """Each of ``n`` vectors takes ``1 / n ** e`` of the rate one vector at its site would take."""
    splits = _splits()
    config = with_config(FAST_RECIPE, lr_vector_count_exponent=exponent)
    layers, positions = [0, 1, 2], [-2, -1]
    together = step_scales(config, llama, splits.task, splits.train, layers, positions)
    alone = [step_scales(config, llama, splits.task, splits.train, [layer], [pos])[0]
             for layer in layers for pos in positions]
    assert together == pytest.approx([a / 6 ** exponent for a in alone], rel=1e-12)
    # an absolute config measures nothing and shares the same way; the released recipe does not share
    assert step_scales(with_config(PAPER_RECIPE, lr_vector_count_exponent=exponent), llama, splits.task,
                       splits.train, layers, positions) == pytest.approx([1 / 6 ** exponent] * 6, rel=1e-12)
    assert step_scales(PAPER_RECIPE, llama, splits.task, splits.train, layers, positions) == (1.0,) * 6


def test_step_scales_takes_a_site_rms_it_is_given(llama):
    splits = _splits()
    measured = step_scales(FAST_RECIPE, llama, splits.task, splits.train, [0, 2], [-1])
    rms = with_config(FAST_RECIPE, lr_final_stream_weight=0.0, lr_stream_statistic="rms")
    given = step_scales(rms, llama, splits.task, splits.train, [0, 2], [-1], site_rms=[3.0, 5.0])
    assert given == pytest.approx((1.5, 2.5), rel=1e-12)  # the given RMS, shared by two vectors
    # a learning rate relative to the typical coordinate measures it: the RMS given is not that
    median = with_config(rms, lr_stream_statistic="median")
    assert step_scales(median, llama, splits.task, splits.train, [0, 2], [-1], site_rms=[3.0, 5.0]) == pytest.approx(
        step_scales(median, llama, splits.task, splits.train, [0, 2], [-1]), rel=1e-12)
    assert measured[0] == pytest.approx(measured[1], rel=1e-12)  # w=1: the last block's stream, whatever the layer


@pytest.mark.parametrize("exponent", [-0.5, 2.0, float("nan")])
def test_a_vector_count_exponent_outside_0_1_names_the_value(exponent):
    with pytest.raises(ValueError, match="lr_vector_count_exponent"):
        with_config(FAST_RECIPE, lr_vector_count_exponent=exponent)


def test_a_ten_times_larger_stream_gets_ten_times_larger_steps():
    from tests.models_fixtures import tiny_llama

    # steps relative to the site alone: scaling the embedding scales the stream entering block 0 exactly
    config = with_config(FAST_RECIPE, epochs=0, lr_final_stream_weight=0.0)
    small, big = tiny_llama(), tiny_llama()
    with torch.no_grad():
        big.model.get_input_embeddings().weight.mul_(10)  # the stream entering block 0 is the embedding
    a = train_ltv(small, "antonym", layers=[0], recipe=config, splits=_splits(), progress=False)
    b = train_ltv(big, "antonym", layers=[0], recipe=config, splits=_splits(), progress=False)
    assert b.training.stream_rms[0] == pytest.approx(10 * a.training.stream_rms[0], rel=1e-5)
    assert b.training.effective_lr[0] == pytest.approx(10 * a.training.effective_lr[0], rel=1e-5)
    assert torch.allclose(b.vectors, 10 * a.vectors, rtol=1e-5, atol=0)  # same draw, scaled start


def test_the_paper_recipe_keeps_its_absolute_numbers(llama):
    assert (PAPER_RECIPE.lr, PAPER_RECIPE.init_range, PAPER_RECIPE.relative_to_stream) == (5e-3, 0.1, False)
    assert PAPER_RECIPE.early_stopping == "accuracy"  # the released code compares plain accuracy
    ltv = train_ltv(llama, "antonym", layers=[0, 2], recipe=with_config(PAPER_RECIPE, epochs=0), splits=_splits(),
                    progress=False)
    assert ltv.training.stream_rms is None
    assert ltv.training.effective_lr == (5e-3, 5e-3) and ltv.training.effective_init == (0.1, 0.1)
    # the same draw as before relative steps existed: U(-0.1, 0.1) from the seed's generator
    gen = torch.Generator().manual_seed(0)
    assert torch.equal(ltv.vectors, (torch.rand(2, llama.d_model, generator=gen) * 2 - 1) * 0.1)


def test_the_fast_recipe_takes_its_chosen_absolute_steps_at_the_reference_stream():
    assert FAST_RECIPE.relative_to_stream and FAST_RECIPE.lr_final_stream_weight == 1.0
    assert FAST_RECIPE.lr_vector_count_exponent == 1.0 and PAPER_RECIPE.lr_vector_count_exponent == 0.0
    # the chosen step: 9 times the relative 0.1 / 6.15 of the last block's RMS on SmolLM2-135M (4.24), now stated
    # relative to that stream's typical coordinate, so SmolLM2 takes the same absolute step
    assert FAST_RECIPE.lr_stream_statistic == "median"
    assert FAST_RECIPE.lr * FAST_REFERENCE_LAST_MEDIAN == pytest.approx(0.9 / 6.15 * 29.0, rel=1e-12)
    assert FAST_RECIPE.init_range * FAST_REFERENCE_RMS == pytest.approx(0.1, rel=1e-12)
    absolute = absolute_recipe(FAST_RECIPE)
    assert absolute.lr == pytest.approx(0.9 / 6.15 * 29.0, rel=1e-12) and absolute.init_range == pytest.approx(0.1)
    assert not absolute.relative_to_stream and absolute.lr_final_stream_weight == 0.0
    assert absolute.lr_stream_statistic == "rms"
    assert absolute_recipe(absolute) is absolute  # absolute configs pass through


@pytest.mark.parametrize("weight", [0.0, 0.5, 1.0])
def test_absolute_recipe_blends_like_the_trainer(weight):
    config = with_config(FAST_RECIPE, lr_final_stream_weight=weight, lr_stream_statistic="rms")
    out = absolute_recipe(config, rms=2.0, last_rms=32.0)
    assert out.lr == pytest.approx(config.lr * 2.0 ** (1 - weight) * 32.0 ** weight, rel=1e-12)
    assert out.init_range == pytest.approx(config.init_range * 2.0, rel=1e-12)
    typical = absolute_recipe(with_config(config, lr_stream_statistic="median"), rms=2.0, median=0.5, last_median=8.0)
    assert typical.lr == pytest.approx(config.lr * 0.5 ** (1 - weight) * 8.0 ** weight, rel=1e-12)
    assert typical.init_range == pytest.approx(config.init_range * 2.0, rel=1e-12)  # the init follows the RMS


# lr=0: steps are taken (two epochs of two; any number of steps at lr 0 leaves the vector where it started)
@pytest.mark.parametrize("config", [with_config(FAST_RECIPE, lr=0.0, epochs=2, samples_per_epoch=32),
                                    with_config(FAST_RECIPE, epochs=0)], ids=["lr=0", "no epochs"])
def test_an_untrained_run_says_so(llama, config):
    ltv = train_ltv(llama, "antonym", layers=[1], recipe=config, splits=_splits(), progress=False)
    assert ltv.training.trained is False
    assert ltv.training.steps_to_best == 0
    t = ltv.training
    assert t.best_val_score == t.start_val_score and t.best_val_accuracy == t.start_val_accuracy
    assert ltv.training.seconds > 0
    # the fast recipe retries a run that did not train (twice, each at a third of the learning rate)
    assert ltv.training.attempts == 1 + FAST_RECIPE.retries_without_progress == 3
    assert len(ltv.training.attempt_scores) == 3 and ltv.training.attempt_scores[-1] == ltv.training.best_val_score


def test_a_run_that_did_not_train_is_retried_at_smaller_steps_until_one_trains(llama, monkeypatch):
    from ltvlib import ltv as ltv_module

    real, factors = ltv_module._attempt, []

    def attempt(lm, specs, lr_factors, **kwargs):
        factors.append(lr_factors[0])
        ((out, baseline),) = real(lm, specs, lr_factors, **kwargs)
        # the first run "does not learn", the second does
        return [(dataclasses.replace(out, training=dataclasses.replace(out.training, learned=len(factors) == 2)),
                 baseline)]

    monkeypatch.setattr(ltv_module, "_attempt", attempt)
    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=8)
    splits = _splits()
    ltv = train_ltv(llama, "antonym", layers=[1], recipe=config, splits=splits, progress=False)
    assert factors == [1.0, pytest.approx(1 / 3)]
    assert ltv.training.attempts == 2 and ltv.training.learned
    (scale,) = step_scales(config, llama, splits.task, splits.train, [1], [-1])
    assert ltv.training.effective_lr[0] == pytest.approx(config.lr / 3 * scale)
    assert ltv.config == config  # the recipe as asked; effective_lr says what the kept run used

    factors.clear()
    ltv = train_ltv(llama, "antonym", layers=[1], recipe=with_config(config, retries_without_progress=0),
                    splits=_splits(), progress=False)
    assert factors == [1.0] and ltv.training.attempts == 1 and ltv.training.trained is False


def test_the_released_recipe_never_retries():
    assert PAPER_RECIPE.retries_without_progress == 0


@pytest.mark.parametrize("change, match", [({"retries_without_progress": -1}, "retries_without_progress"),
                                           ({"retry_lr_factor": 1.0}, "retry_lr_factor")])
def test_bad_retry_settings_name_the_value(change, match):
    with pytest.raises(ValueError, match=match):
        with_config(FAST_RECIPE, **change)


def test_a_run_that_beats_its_start_says_so_and_when(llama):
    """A large relative step on the tiny model changes validation accuracy within an epoch or two; whatever it
    does, ``trained`` and ``steps_to_best`` must agree with the recorded curve."""
    config = with_config(FAST_RECIPE, epochs=3, samples_per_epoch=16, batch_size=8, lr=20.0, patience=3)
    ltv = train_ltv(llama, "antonym", layers=[1], recipe=config, splits=_splits(), progress=False)
    epochs = [c for c in ltv.training.curve if "val_score" in c]
    assert epochs[0]["val_score"] == ltv.training.start_val_score and epochs[0]["step"] == 0
    best = max(e["val_score"] for e in epochs)
    assert ltv.training.best_val_score == best and (best > ltv.training.start_val_score or not ltv.training.learned)
    first_best = next(e for e in epochs if e["val_score"] == best)
    assert ltv.training.steps_to_best == (first_best["step"] if best > ltv.training.start_val_score else 0)


def test_early_stopping_uses_balanced_accuracy_for_classification(llama):
    from ltvlib.tasks import get_task

    assert validation_metric(FAST_RECIPE, get_task("sst2")) == "balanced_accuracy"
    assert validation_metric(FAST_RECIPE, get_task("antonym")) == "accuracy"
    assert validation_metric(PAPER_RECIPE, get_task("sst2")) == "accuracy"
    assert validation_metric(with_config(FAST_RECIPE, early_stopping="accuracy"), get_task("sst2")) == "accuracy"
    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=8)
    ltv = train_ltv(llama, "sst2", layers=[1], recipe=config, splits=load_splits("sst2", **SMALL), progress=False)
    assert ltv.training.val_metric == "balanced_accuracy"
    for e in (c for c in ltv.training.curve if "val_score" in c):
        assert e["val_score"] == e["val_balanced_accuracy"] is not None
    with pytest.raises(ValueError, match="unknown early_stopping 'f1'; allowed: auto, accuracy, balanced_accuracy"):
        with_config(FAST_RECIPE, early_stopping="f1")


def _flat_metadata(ltv: LearnedTaskVector) -> dict:
    """The metadata as files wrote it when the training fields sat beside the provenance (no ``training``)."""
    meta = ltv.metadata()
    meta.update(meta.pop("training"))
    return meta


def test_a_file_with_training_fields_beside_the_provenance_loads_into_a_training_record(llama, tmp_path):
    import json

    from safetensors.torch import save

    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=8)
    ltv = train_ltv(llama, "antonym", layers=[1], recipe=config, splits=_splits(), progress=False)
    meta = _flat_metadata(ltv)
    assert "training" not in meta and "curve" in meta and "learned" in meta
    path = tmp_path / "flat.safetensors"
    path.write_bytes(save({"vectors": ltv.vectors}, metadata={"ltv": json.dumps(meta)}))
    back = LearnedTaskVector.load(path)
    assert back.metadata() == ltv.metadata()
    assert isinstance(back.training, TrainingRecord) and back.training.learned is ltv.training.learned
    assert back.training.effective_lr == ltv.training.effective_lr and back.training.curve == ltv.training.curve
    assert torch.equal(back.vectors, ltv.vectors)


def test_metadata_without_names_training_fields_only():
    ltv = LearnedTaskVector(torch.zeros(1, 4), (1,), (-1,), "m", "antonym", "fast", 0, 0, FAST_RECIPE,
                            training=TrainingRecord(curve=[{"step": 1, "loss": 2.0}], seconds=3.0))
    meta = ltv.metadata(without=("curve", "seconds"))
    assert meta["training"]["curve"] is None and meta["training"]["seconds"] is None
    assert ltv.training.curve == [{"step": 1, "loss": 2.0}]  # the vector's own record is unchanged
    with pytest.raises(ValueError, match="unknown training field 'layers'"):
        ltv.metadata(without=("layers",))


def test_a_file_from_before_these_fields_loads_with_them_derived_from_its_curve(llama, tmp_path):
    import json

    from safetensors.torch import save

    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=8)
    ltv = train_ltv(llama, "antonym", layers=[1], recipe=config, splits=_splits(), progress=False)
    meta = _flat_metadata(ltv)
    for name in ("start_val_accuracy", "val_metric", "best_val_score", "start_val_score", "steps_to_best",
                 "trained", "stream_rms", "effective_lr", "effective_init"):
        del meta[name]
    for name in ("relative_to_stream", "early_stopping"):
        del meta["config"][name]
    meta["curve"] = [{"epoch": 0, "val_accuracy": 0.25}, {"step": 1, "loss": 2.0, "lr": 0.1},
                     {"epoch": 1, "val_accuracy": 0.5, "step": 4}, {"epoch": 2, "val_accuracy": 0.5, "step": 8}]
    path = tmp_path / "old.safetensors"
    path.write_bytes(save({"vectors": ltv.vectors}, metadata={"ltv": json.dumps(meta)}))
    old = LearnedTaskVector.load(path)
    assert (old.training.trained, old.training.steps_to_best, old.training.start_val_accuracy) == (True, 4, 0.25)
    assert old.config.relative_to_stream is False and old.config.early_stopping == "accuracy"
    meta["curve"] = []
    path.write_bytes(save({"vectors": ltv.vectors}, metadata={"ltv": json.dumps(meta)}))
    assert LearnedTaskVector.load(path).training.trained is None


def test_seconds_include_building_the_prompts_and_the_first_validation(llama, monkeypatch):
    import time

    from ltvlib import ltv as ltv_module

    build = ltv_module._training_prompts

    def slow_build(*args, **kwargs):
        time.sleep(0.3)
        return build(*args, **kwargs)

    monkeypatch.setattr(ltv_module, "_training_prompts", slow_build)
    ltv = train_ltv(llama, "antonym", layers=[1], recipe=with_config(FAST_RECIPE, epochs=0), splits=_splits(),
                    progress=False)
    assert ltv.training.seconds >= 0.3


@pytest.mark.realmodel
def test_the_reference_rms_is_smollm2s_middle_layer_on_antonym_training_prompts():
    """FAST_REFERENCE_RMS is a measurement: the fast recipe takes its tuned absolute steps (lr 0.1) at SmolLM2's
    layer 15, within 1 %."""
    from ltvlib.models import load_model
    from ltvlib.stream_scale import site_stream_rms, site_stream_scale

    lm = load_model("smollm2-135m", device="cpu")
    splits = load_splits("antonym", seed=0)
    (rms,) = site_stream_rms(lm, splits.task, splits.train, [15], [-1])
    assert rms == pytest.approx(FAST_REFERENCE_RMS, rel=0.01)
    (first,) = site_stream_rms(lm, splits.task, splits.train, [0], [-1])
    (last,) = site_stream_rms(lm, splits.task, splits.train, [lm.n_layers - 1], [-1])
    assert last > 100 * first  # the range a single site-relative learning rate serves badly
    # the fast recipe's learning rate is relative to this stream's typical coordinate: lr * 10.9 = 4.24 at every layer
    assert last == pytest.approx(FAST_REFERENCE_LAST_RMS, rel=0.02)
    (typical,) = site_stream_scale(lm, splits.task, splits.train, [lm.n_layers - 1], [-1], statistic="median")
    assert typical == pytest.approx(FAST_REFERENCE_LAST_MEDIAN, rel=0.01)
    (middle,) = site_stream_scale(lm, splits.task, splits.train, [15], [-1], statistic="median")
    assert middle == pytest.approx(FAST_REFERENCE_MEDIAN, rel=0.01)


def test_the_learned_rule_needs_the_accuracy_interval_above_no_vector_and_the_majority():
    from ltvlib.ltv import learned_rule, majority_rate
    from ltvlib.stats import wilson_interval
    from ltvlib.tasks import Example

    # the motivating case: a constant "negative" on 200 balanced queries (0.5) does not beat the majority (0.5)
    assert learned_rule(0.5, 200, 0.3, 0.5) == (False, wilson_interval(100, 200)[0])
    assert learned_rule(0.6, 200, 0.3, 0.5)[0]  # lower end 0.531 > 0.5
    assert not learned_rule(0.6, 200, 0.55, 0.5)[0]  # ... but not above a better zero-shot score
    assert not learned_rule(1.0, 0, 0.0, 0.0)[0]
    examples = [Example("a", "x"), Example("b", "y"), Example("c", "x")]
    assert majority_rate(examples) == pytest.approx(2 / 3)


def test_when_no_attempt_learns_the_best_attempt_is_kept(llama, monkeypatch):
    """Retries at smaller steps that score worse do not replace the first attempt's vector (else every run that
    did not learn would end as its last, least-moved attempt: two directions' vectors came out equal)."""
    from ltvlib import ltv as ltv_module

    real, made = ltv_module._attempt, []

    def attempt(lm, specs, lr_factors, **kwargs):
        ((out, baseline),) = real(lm, specs, lr_factors, **kwargs)
        score = [0.5, 0.25, 0.375][len(made)]
        vectors = out.vectors + len(made)  # each attempt's vector told apart
        made.append(vectors)
        return [(dataclasses.replace(out, vectors=vectors, training=dataclasses.replace(
            out.training, learned=False, best_val_score=score)), baseline)]

    monkeypatch.setattr(ltv_module, "_attempt", attempt)
    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=8)
    ltv = train_ltv(llama, "antonym", layers=[1], recipe=config, splits=_splits(), progress=False)
    assert ltv.training.attempt_scores == (0.5, 0.25, 0.375) and ltv.training.best_val_score == 0.5
    assert torch.equal(ltv.vectors, made[0])


def test_a_run_that_did_not_learn_is_retried_and_says_so(gemma, tmp_path):
    """On the tiny Gemma no run's 16 validation queries give an interval above zero-shot and the majority label:
    every run is retried, at a third of the step each time, and the saved vector says it did not learn and why."""
    config = with_config(FAST_RECIPE, epochs=3, samples_per_epoch=16, batch_size=8, lr=20.0, patience=3)
    ltv = train_ltv(gemma, "sst2", layers=[1], recipe=config, splits=_splits("sst2"), progress=False)
    assert ltv.training.learned is False and ltv.training.trained is False
    assert ltv.training.attempts == 1 + config.retries_without_progress == 3 and len(ltv.training.attempt_scores) == 3
    assert ltv.training.val_n == 16 and ltv.training.majority_val_rate == pytest.approx(0.5)
    assert 0.0 <= ltv.training.no_vector_val_accuracy <= 1.0
    assert ltv.training.val_accuracy_low < max(ltv.training.no_vector_val_accuracy, ltv.training.majority_val_rate)
    back = LearnedTaskVector.load(ltv.save(tmp_path / "v.safetensors"))
    assert (back.training.learned, back.training.val_accuracy_low, back.training.majority_val_rate) == (
        False, ltv.training.val_accuracy_low, 0.5)


def test_a_learned_vector_is_a_task_vector_that_moves_one_layer_and_says_where_it_goes(llama, tmp_path):
    from safetensors import safe_open

    from ltvlib.inject import apply
    from ltvlib.task_vector import TaskVector
    from ltvlib.vector_files import load_task_vector

    one = LearnedTaskVector(vectors=torch.randn(2, 64), layers=(1,), positions=(-2, -1), model=llama.name,
                            task="antonym", recipe="fast", seed=0, shots=0, config=FAST_RECIPE)
    assert isinstance(one, TaskVector)
    assert [(e.layer, e.position) for e in one.edits(layer=2)] == [(2, -2), (2, -1)]
    assert torch.equal(one.edits(2.0)[1].vector, 2 * one.vectors[1])
    two = LearnedTaskVector(vectors=torch.randn(2, 64), layers=(0, 2), positions=(-1,), model=llama.name,
                            task="antonym", recipe="fast", seed=0, shots=0, config=FAST_RECIPE)
    with pytest.raises(ValueError, match="one-layer"):
        two.edits(layer=1)
    ids = llama.tokenizer("hot cold big small", return_tensors="pt").input_ids
    with one.apply(llama, layer=2, scale=0.5):
        moved = llama.model(ids).logits
    with apply(llama, one.edits(0.5, layer=2)):
        assert torch.equal(llama.model(ids).logits, moved)
    path = one.save(tmp_path / "v.safetensors")
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    assert (meta["site"], meta["mode"], meta["layers"], meta["positions"]) == ("block_input", "add", "[1]", "[-2, -1]")
    assert torch.equal(load_task_vector(path).vectors, one.vectors)
