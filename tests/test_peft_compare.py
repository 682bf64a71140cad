"""The LTV-against-peft harness on tiny random models: parameter counts, training, batches, padding."""

from __future__ import annotations

import math

import pytest
import torch

from ltvlib.analysis import peft_compare as pc
from ltvlib.forward import PromptRunner
from ltvlib.ltv import FAST_RECIPE, answer_loss, train_ltv, with_config
from ltvlib.tasks import load_splits

SCHEDULE = with_config(FAST_RECIPE, batch_size=4, samples_per_epoch=8, epochs=2, patience=5)


def all_methods(lm):
    return pc.equal_budget_methods(lm) + pc.usual_methods(lm) + pc.default_methods(lm)


# Test splits cut to a few prompts: no check here depends on their number (the full files hold 872 SST-2 and
# 1,398 Antonym test prompts, and every train_and_measure scores all of them, which cost most of this file's time);
# 20 with eval batches of 8 also scores a last, partial batch.
N_TEST = 20


@pytest.fixture(scope="module")
def prepared_llama(llama):
    return pc.prepare(llama, load_splits("antonym", n_train=32, n_val=8, n_test=N_TEST))


@pytest.fixture(scope="module")
def prepared_sst2(tiny):
    """SST-2 prompts of different lengths (for the padding checks) on either tiny model; read, never changed."""
    return pc.prepare(tiny, load_splits("sst2", n_train=32, n_val=8, n_test=N_TEST))


def test_parameter_counts_match_the_formula(tiny):
    for method in all_methods(tiny):
        trainee = pc.make_trainee(tiny, method, init_range=0.1, seed=0)
        try:
            assert trainee.n_trainable() == pc.parameter_formula(tiny, method)[0], method.name
        finally:
            trainee.close()


def test_parameter_counts_by_hand(llama, gemma):
    # tiny llama: d 64, 3 layers, 4 heads and 2 KV heads of 16; tiny gemma: d 64, 3 layers, 4 heads and 1 KV head of 32
    by_name = {m.name: pc.parameter_formula(llama, m)[0] for m in all_methods(llama)}
    assert by_name["ltv"] == 64 and by_name["prompt-1"] == 64 and by_name["prompt-10"] == 640
    assert by_name["prefix-1"] == 3 * 2 * 2 * 16 and by_name["prefix-10"] == 10 * 192
    assert by_name["lora-r1-o1"] == 64 + 64  # rank 1 on o_proj: H h + d = 2d here
    assert by_name["lora-r8-qkvo"] == 3 * 8 * ((64 + 64) + 2 * (64 + 32) + (64 + 64))
    g = {m.name: pc.parameter_formula(gemma, m)[0] for m in all_methods(gemma)}
    assert g["prefix-1"] == 3 * 2 * 1 * 32
    assert g["lora-r1-o1"] == 4 * 32 + 64  # H h != d on Gemma: not 2d
    assert by_name["lora-r8-qv"] == 3 * 8 * ((64 + 64) + (64 + 32))  # peft's default: rank 8 on q and v
    assert by_name["prefix-20"] == 20 * 192 and by_name["prompt-20"] == 20 * 64


def test_parameter_counts_in_units_of_d(llama, gemma):
    units = {m.name: pc.parameter_units(llama, m) for m in pc.race_methods(llama)}
    # prefix tuning trains a key and a value in every layer: one virtual token is 2 L H_kv h = 3d here
    assert units == {"ltv": "1d", "prompt-1": "1d", "prefix-1-L1": "1d", "prefix-1": "3d", "lora-r1-o1": "2d",
                     "lora-r8-qv": "84d", "prefix-20": "60d", "prompt-20": "20d"}
    assert pc.parameter_units(gemma, pc.Method("x", "lora", 1e-3, rank=1, layers=(1,))) == "3d"  # 4 x 32 + 64
    assert pc.parameter_units(gemma, pc.Method("x", "lora", 1e-3, rank=1, targets=("k_proj",), layers=(1,))) == "1.50d"
    assert [m.budget for m in pc.race_methods(llama)] == ["equal"] * 5 + ["default"] * 3


def test_stopping_rule_validation_points():
    rule = pc.StoppingRule(val_every=6, patience=2)
    assert rule.checkpoints([[0] * 4] * 5) == [1, 2, 4]  # 8 >= 6, 12 >= 12, then the end of the budget
    assert pc.StoppingRule(val_every=4, patience=1).checkpoints([[0] * 4] * 3) == [0, 1, 2]
    per_epoch = pc.StoppingRule.from_config(SCHEDULE)  # the rule train_ltv applies: once per epoch
    assert (per_epoch.val_every, per_epoch.patience) == (SCHEDULE.samples_per_epoch, SCHEDULE.patience)
    assert per_epoch.checkpoints([[0] * 4] * 4) == [1, 3]
    with pytest.raises(ValueError, match="unknown metric"):
        pc.StoppingRule(4, 2, metric="f1")


@pytest.mark.parametrize(
    ("after_gain", "scores", "stops_at", "best"),
    [(False, [0.4, 0.4, 0.9], 1, 0.5), (True, [0.4, 0.4, 0.6, 0.5, 0.5, 0.9], 4, 0.6), (False, [0.6, 0.5, 0.7], None, 0.7)],
)
def test_early_stopping_counts_patience_like_train_ltv(after_gain, scores, stops_at, best):
    stopper = pc.EarlyStopping(pc.StoppingRule(8, 2, after_gain=after_gain), start_score=0.5)
    stopped = None
    for i, score in enumerate(scores):
        stopper.observe(score)
        if stopper.stop:
            stopped = i
            break
    assert stopped == stops_at and stopper.best == best


def _replay(result):
    """The rule applied to the recorded validation scores: how many validations it allows, and the best."""
    rule = pc.StoppingRule(**result["rule"])
    stopper = pc.EarlyStopping(rule, result["curve"][0]["val_score"])
    for n, point in enumerate(result["curve"][1:], start=2):
        stopper.observe(point["val_score"])
        if stopper.stop:
            return n, stopper.best
    return len(result["curve"]), stopper.best


def test_every_method_runs_under_the_same_rule_and_budget(tiny, prepared_sst2):
    """LTV, prefix tuning and LoRA: the same samples, the same validation points, the same metric (balanced
    accuracy on a classification task), the rule's stopping decision, and time-to-accuracy curves."""
    prepared = prepared_sst2
    names = ("ltv", "prefix-1", "lora-r8-qv")
    methods = [m for m in pc.race_methods(tiny) if m.name in names]
    full = pc.StoppingRule(val_every=6, patience=99)
    results = [pc.train_and_measure(tiny, prepared, m, SCHEDULE, eval_batch=8, rule=full) for m in methods]
    for r in results:
        assert r["val_metric"] == "balanced_accuracy" and r["sample_budget"] == 16 == r["samples_seen"]
        assert [c["samples"] for c in r["curve"]] == [0, 8, 12, 16] and r["n_validations"] == 4
        assert all(c["val_balanced_accuracy"] is not None and c["val_score"] == c["val_balanced_accuracy"]
                   for c in r["curve"])
        walls = [c["wall_seconds"] for c in r["curve"]]
        trains = [c["train_seconds"] for c in r["curve"]]
        assert walls == sorted(walls) and trains == sorted(trains) and trains[-1] <= walls[-1]
        assert r["best_val_score"] == max(c["val_score"] for c in r["curve"])
        hit = pc.time_to_accuracy(r["curve"], r["best_val_accuracy"])
        assert hit is not None and hit["samples"] <= r["samples_to_best"]
    # patience 1: each method stops where the rule, replayed on its own scores, says
    strict = pc.StoppingRule(val_every=4, patience=1)
    for m in methods:
        r = pc.train_and_measure(tiny, prepared, m, SCHEDULE, eval_batch=8, rule=strict)
        assert (r["n_validations"], r["best_val_score"]) == _replay(r)
        assert [c["samples"] for c in r["curve"]] == [0, 4, 8, 12, 16][: r["n_validations"]]


def test_time_to_accuracy_reads_the_first_point_at_the_target():
    curve = [{"samples": s, "wall_seconds": w, "train_seconds": w / 2, "val_accuracy": a}
             for s, w, a in [(0, 0.1, 0.2), (8, 1.0, 0.5), (16, 2.0, 0.7), (24, 3.0, 0.6)]]
    assert pc.time_to_accuracy(curve, 0.6) == {"samples": 16, "wall_seconds": 2.0, "train_seconds": 1.0,
                                               "val_accuracy": 0.7}
    assert pc.time_to_accuracy(curve, 0.8) is None


@pytest.mark.parametrize("kind", ["ltv", "prompt-1", "prefix-1", "prefix-1-L1", "lora", "lora-r8-qkvo", "prefix-10",
                                  "prompt-10"])
def test_each_adapter_lowers_its_loss(llama, prepared_llama, kind):
    methods = {m.name: m for m in all_methods(llama)}
    method = methods.get(kind) or next(m for m in methods.values() if m.kind == kind)
    trainee = pc.make_trainee(llama, method, init_range=0.1, seed=0)
    try:
        # five times the method's learning rate: 12 steps must move a random tiny model visibly
        opt = torch.optim.AdamW(trainee.params, lr=5 * method.lr)
        index = list(range(8))
        answers = [prepared_llama.train_answers[i] for i in index]
        losses, start = [], trainee.state()
        for _ in range(12):
            logits, valid = trainee.logits(prepared_llama.train, index, answers)
            loss = answer_loss(logits, answers, valid)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[-1] < losses[0] - 0.05, losses
        # every adapter tensor moved (LoRA's A only once B is no longer zero)
        assert all(not torch.equal(a, b) for a, b in zip(start, trainee.state()))
    finally:
        trainee.close()


def test_shared_model_is_not_modified(llama):
    before = {k: v.clone() for k, v in llama.model.state_dict().items()}
    names = {n for n, _ in llama.model.named_modules()}
    for method in all_methods(llama):
        pc.make_trainee(llama, method, init_range=0.1, seed=0).close()
    assert {n for n, _ in llama.model.named_modules()} == names
    after = llama.model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize("name", ["prompt-10", "prefix-10", "lora-r8-qkvo"])
def test_batched_equals_unbatched(tiny, prepared_sst2, name):
    # left padding and the positions that skip it: a prompt's logits do not depend on its batch-mates
    method = next(m for m in all_methods(tiny) if m.name == name)
    prepared = prepared_sst2  # prompts of different lengths
    trainee = pc.make_trainee(tiny, method, init_range=0.1, seed=0)
    try:
        with torch.no_grad():
            lengths = [len(r) for r in prepared.train.rows]
            index = [lengths.index(min(lengths)), lengths.index(max(lengths))]
            assert min(lengths) < max(lengths)
            answers = [prepared.train_answers[i] for i in index]
            batched, _ = trainee.logits(prepared.train, index, answers)
            for b, i in enumerate(index):
                alone, _ = trainee.logits(prepared.train, [i], [answers[b]])
                n = len(answers[b])
                torch.testing.assert_close(batched[b, :n], alone[0, :n], atol=1e-4, rtol=1e-4)
    finally:
        trainee.close()


def test_prefix_tuning_changes_the_output(llama, prepared_llama):
    # guards against the virtual keys/values being silently dropped (transformers renamed the cache kwarg)
    method = next(m for m in all_methods(llama) if m.name == "prefix-1")
    trainee = pc.make_trainee(llama, method, init_range=0.1, seed=0)
    try:
        with torch.no_grad():
            logits, _ = trainee.logits(prepared_llama.train, [0, 1], None)
            base = PromptRunner(llama, prepared_llama.train, tail=None, cache_rows=False).run([0, 1])[0]
        assert not torch.allclose(logits, base, atol=1e-3)
    finally:
        trainee.close()


def test_batch_schedule_is_train_ltvs(llama, monkeypatch):
    splits = load_splits("antonym", n_train=10, n_val=4)
    import ltvlib.ltv as ltv_module

    seen: list[list[int]] = []
    original = ltv_module.run_rows

    def spy(rows, edits=(), *, answers=None):
        if answers is not None:  # a training step (validation runs without answers)
            seen.append([i for _, i in rows])
        return original(rows, edits, answers=answers)

    monkeypatch.setattr(ltv_module, "run_rows", spy)
    # 12 > 10: an epoch wraps around; one run (a retry of a run that did not train would repeat the schedule)
    config = with_config(SCHEDULE, patience=99, samples_per_epoch=12, retries_without_progress=0)
    train_ltv(llama, "antonym", recipe=config, seed=3, splits=splits, progress=False)
    expected = [b for epoch in pc.batch_schedule(10, config, 3) for b in epoch]
    assert seen == expected


def test_train_and_measure_reports_everything(llama, prepared_llama):
    method = next(m for m in all_methods(llama) if m.name == "lora-r8-qkvo")
    r = pc.train_and_measure(llama, prepared_llama, method, SCHEDULE, seed=0, eval_batch=4)
    assert r["trainable_params"] == r["formula_params"]
    assert r["steps"] == 4 and len(r["step_seconds"]) == 4 and r["median_step_seconds"] > 0
    assert [c["epoch"] for c in r["curve"]] == [0, 1, 2]
    assert r["steps_to_best"] in (0, 2, 4) and 0 <= r["test_accuracy"] <= 1 and r["latency_ms"] > 0


def test_memory_in_process(llama, prepared_llama):
    method = next(m for m in all_methods(llama) if m.name == "prompt-1")
    mem = pc.measure_memory_here(llama, prepared_llama, method, SCHEDULE, eval_batch=4)
    assert mem["peak_infer_mb"] > 0 and mem["peak_train_mb"] > 0 and mem["base_mb"] > 0


def test_bad_methods_are_refused():
    with pytest.raises(ValueError, match="unknown method kind"):
        pc.Method("x", "ia3", 1e-3)
    with pytest.raises(ValueError, match="unknown LoRA target"):
        pc.Method("x", "lora", 1e-3, targets=("up_proj",))


def test_prefix_starts_as_the_models_own_keys_and_values(tiny):
    # initialised from random tokens' keys/values: before training, prefix + prompt = the model on tokens + prompt
    method = next(m for m in all_methods(tiny) if m.name == "prefix-10")
    prepared = pc.prepare(tiny, load_splits("sst2", n_train=8, n_val=4, n_test=4))
    trainee = pc.make_trainee(tiny, method, init_range=0.1, seed=0)
    try:
        with torch.no_grad():
            got, _ = trainee.logits(prepared.train, [0], None)
            ids = torch.tensor([trainee.init_tokens + list(prepared.train.shared) + list(prepared.train.rows[0])])
            want = tiny.model(input_ids=ids, logits_to_keep=1).logits
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    finally:
        trainee.close()


def test_one_layer_prefix_trains_its_layer_only(tiny):
    """Prefix tuning at one layer: the same one-token prefix as prefix-1, frozen, with a trainable change of the
    keys and values of that layer only (2 H_kv h parameters, at most d); a step moves that layer's slice of the
    prefix and no other."""
    method = next(m for m in all_methods(tiny) if m.kind == "prefix_tuning" and m.layers is not None)
    layer = method.layers[0]
    prepared = pc.prepare(tiny, load_splits("sst2", n_train=8, n_val=4, n_test=4))
    trainee = pc.make_trainee(tiny, method, init_range=0.1, seed=0)
    try:
        g = tiny.geometry
        kv = g.n_kv_heads * g.head_dim
        assert trainee.n_trainable() == 2 * kv == pc.parameter_formula(tiny, method)[0] <= tiny.d_model
        encoder = trainee.model.prompt_encoder[trainee.model.active_adapter]
        tokens = torch.zeros(1, 1, dtype=torch.long)
        before = encoder(tokens).detach().clone()
        opt = torch.optim.AdamW(trainee.params, lr=0.1)
        answers = [prepared.train_answers[i] for i in range(4)]
        logits, valid = trainee.logits(prepared.train, list(range(4)), answers)
        answer_loss(logits, answers, valid).backward()
        opt.step()
        moved = (encoder(tokens).detach() != before)[0, 0]
        inside = torch.zeros_like(moved)
        inside[2 * layer * kv:(2 * layer + 2) * kv] = True
        assert moved[inside].any() and not moved[~inside].any()
    finally:
        trainee.close()
    with pytest.raises(ValueError, match="layer"):
        pc.make_trainee(tiny, pc.Method("p", "prefix_tuning", 0.1, layers=(99,)), init_range=0.1, seed=0)


# ------------------------------------------------------------------------------------------- the race


def test_train_and_measure_records_what_the_race_needs(tiny, prepared_sst2):
    """Per-query correctness (the paired comparisons' input), whether the run trained, and whether the rule
    stopped it: the last two replayed from the recorded validation scores."""
    prepared = prepared_sst2
    method = next(m for m in pc.race_methods(tiny) if m.name == "ltv")
    for rule in (pc.StoppingRule(val_every=4, patience=1), pc.StoppingRule(val_every=4, patience=99)):
        r = pc.train_and_measure(tiny, prepared, method, SCHEDULE, seed=2, eval_batch=8, rule=rule)
        assert len(r["test_correct"]) == r["n_test"] == len(prepared.test.rows)
        assert sum(r["test_correct"]) / r["n_test"] == pytest.approx(r["test_accuracy"])
        assert set(r["test_correct"]) <= {0, 1} and r["seed"] == 2
        assert r["start_val_score"] == r["curve"][0]["val_score"]
        assert r["trained"] == (r["best_val_score"] > r["start_val_score"])
        stopper = pc.EarlyStopping(rule, r["start_val_score"])
        stopped = False
        for point in r["curve"][1:]:
            stopper.observe(point["val_score"])
            stopped = stopped or stopper.stop
        assert r["stopped_by_rule"] == stopped
    assert r["stopped_by_rule"] is False  # patience 99 never runs out in 4 validations


def test_race_ltv_goes_through_the_ledger():
    from ltvlib.study.ltv_report import DID_NOT_TRAIN, LTVLedger

    run = {"kind": "ltv", "method": "ltv", "seed": 1, "trained": False, "start_val_score": 0.5,
           "best_val_score": 0.5, "steps_to_best": 0, "test_accuracy": 0.6}
    ledger = LTVLedger()
    untrained = pc.race_ltv(run, "sst2", 15, "race-fast")
    assert math.isnan(ledger.value(untrained, run["test_accuracy"], where="t"))
    assert ledger.cell(untrained, "60.0", where="t") == DID_NOT_TRAIN
    trained = pc.race_ltv(run | {"trained": True, "best_val_score": 0.7, "seed": 2}, "sst2", 15, "race-fast")
    assert ledger.value(trained, 0.6, where="t") == 0.6
    assert [r.shown for r in ledger.rows] == [DID_NOT_TRAIN, "number"]
    with pytest.raises(ValueError, match="LTV run"):
        pc.race_ltv(run | {"kind": "lora"}, "sst2", 15, "race-fast")


def test_correct_matrix_pairs_runs_on_the_same_queries():
    m = pc.correct_matrix([{"test_correct": [1, 0, 1]}, {"test_correct": [0, 0, 1]}])
    assert m.shape == (2, 3) and m.sum() == 3
    with pytest.raises(ValueError, match="different numbers of queries"):
        pc.correct_matrix([{"test_correct": [1, 0, 1]}, {"test_correct": [0, 1]}])


def test_step_time_ratio_pairs_steps_by_seed():
    a = [{"seed": s, "step_seconds": [9.0] + [1.0] * 10} for s in (0, 1)]
    b = [{"seed": s, "step_seconds": [1.0] + [2.0] * 6} for s in (1, 0)]  # shorter, other order
    est = pc.step_time_ratio(a, b)
    # the first (warm-up) step is left out; pairs up to the shorter run: 6 per seed, each a / b = 0.5
    assert est.value == pytest.approx(0.5) and est.interval == pytest.approx((0.5, 0.5))
    assert est.n == 12 and est.seeds == 2
    noisy = [{"seed": 0, "step_seconds": [1.0] + [1.0, 1.5, 0.8, 1.2, 1.1, 0.9]}]
    e = pc.step_time_ratio(noisy, [{"seed": 0, "step_seconds": [1.0] * 7}])
    assert e.low < e.value < e.high and e.low < 1.0 < e.high
    with pytest.raises(ValueError, match="no paired steps"):
        pc.step_time_ratio(a, [{"seed": 5, "step_seconds": [1.0] * 3}])


def test_race_curve_averages_the_seeds_still_running():
    def run(accs):
        return {"curve": [{"samples": 8 * i, "wall_seconds": float(i), "train_seconds": i / 2, "val_accuracy": a}
                          for i, a in enumerate(accs)]}

    curve = pc.race_curve([run([0.0, 0.5, 1.0]), run([0.5, 0.5])], n_val=4)
    assert [p["seeds"] for p in curve] == [2, 2, 1]
    assert [p["val_accuracy"] for p in curve] == [0.25, 0.5, 1.0]
    assert [p["samples"] for p in curve] == [0, 8, 16]
    assert all(p["low"] <= p["val_accuracy"] <= p["high"] for p in curve)
    assert curve[1]["high"] - curve[1]["low"] < pc.race_curve([run([0.5, 0.5])], n_val=4)[1]["high"] - pc.race_curve(
        [run([0.5, 0.5])], n_val=4)[1]["low"]  # pooled over two seeds: narrower than one
