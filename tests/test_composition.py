"""ltvlib.study.composition: no test word in any training data, sums of vectors, the four-form scores."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from ltvlib.evaluate import EvalSet, evaluate
from ltvlib.inject import VectorEdit, inject
from ltvlib.kv_cache import forward_tokens
from ltvlib.ltv import FAST_RECIPE, LearnedTaskVector
from ltvlib.prompts import answer_ids, encode_prompts, pad_left
from ltvlib.study import composition as comp
from ltvlib.study.plans import get_profile, run_sizes
from ltvlib.tasks import Example, get_task
from tests.margins import PATH_GAP, smallest_margin


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_words_split_compounds_and_fold_case():
    assert comp.words("petit-fils") == {"petit", "fils"}
    assert comp.words("homme d'affaires") == {"homme", "d", "affaires"}
    assert comp.words("Écossaise") == {"écossaise"}
    assert comp.example_words(Example("wife", "épouse", ("femme",))) == {"wife", "épouse", "femme"}


@pytest.mark.parametrize("profile", ["smoke", "cpu", "paper"])
def test_no_test_word_in_any_training_or_validation_split(profile):
    run = run_sizes(get_profile(profile))
    data = comp.composition_data(run)
    train_p, val_p, test_p = comp.split_pairs(comp.gender_pairs())
    assert len(test_p) == comp.TEST_PAIRS == len(data.test) == 100 and len(val_p) == comp.VAL_PAIRS
    # every word of every form of every test pair is banned
    for p in test_p:
        for form in comp.FORMS_FIELDS:
            assert comp.words(p[form]) <= data.banned
    for t in comp.TASKS:
        kept = [*data.splits[t].train, *data.splits[t].validation]
        assert kept, t
        assert all(not comp.example_words(e) & data.banned for e in kept)
        # nothing else is dropped (up to the run's caps on training and validation)
        raw = [e for p in (*train_p, *val_p) for e in comp.pair_examples(t, p)]
        assert all(comp.example_words(e) & data.banned for e in data.dropped[t])
        assert len(raw) - len(data.dropped[t]) >= len(kept)
        assert len(data.splits[t].train) == min(run.n_train, sum(
            1 for p in train_p for e in comp.pair_examples(t, p) if not comp.example_words(e) & data.banned))
    # the three tasks cut the same pairs: the composed test queries are the English masculine nouns of the test pairs
    assert [e.input for e in data.test] == [p["english_masc"] for p in test_p]
    for e, forms in zip(data.test, data.forms):
        assert e.output in forms["french_fem"] and forms["english_masc"] == (e.input,)
    comp.check_no_leak(data, data.splits[comp.COMPOSED].train)


def test_pairs_are_distinct_and_the_split_is_seeded():
    pairs = comp.gender_pairs()
    assert len(pairs) >= comp.TEST_PAIRS + comp.VAL_PAIRS + 40
    assert len({p["english_masc"] for p in pairs}) == len(pairs)
    assert all(p["french_masc"] != p["french_fem"] and p["english_masc"] != p["english_fem"] for p in pairs)
    assert comp.split_pairs(pairs) == comp.split_pairs(pairs)
    assert comp.split_pairs(pairs, seed=1) != comp.split_pairs(pairs)
    with pytest.raises(ValueError, match="cannot give"):
        comp.split_pairs(pairs[:30])
    with pytest.raises(ValueError, match="unknown composition task"):
        comp.pair_examples("antonym", pairs[0])
    assert [e.output for e in comp.pair_examples(comp.EN_FR, pairs[0])] == [pairs[0]["french_masc"], pairs[0]["french_fem"]]


def test_the_raw_splits_do_share_words_so_the_filter_is_needed():
    data = comp.composition_data(run_sizes(get_profile("cpu")))
    assert sum(len(d) for d in data.dropped.values()) > 0


def test_a_leaking_example_is_caught():
    data = comp.composition_data(run_sizes(get_profile("smoke")))
    word = data.test[0].output
    leaky = replace(data.splits[comp.EN_FR], train=(*data.splits[comp.EN_FR].train, Example("x", word)))
    with pytest.raises(comp.LeakError, match="contains test words"):
        comp.check_no_leak(replace(data, splits={**data.splits, comp.EN_FR: leaky}))
    with pytest.raises(comp.LeakError, match="demonstration"):
        comp.check_no_leak(data, [Example(data.test[0].input, "y")])
    with pytest.raises(AssertionError):  # LeakError is an assertion, as the brief asks
        comp.check_no_leak(data, [Example(data.test[0].input, "y")])


def _ltv(lm, task, seed, layer=None):
    g = torch.Generator().manual_seed(seed)
    return LearnedTaskVector(torch.randn(1, lm.d_model, generator=g), (layer if layer is not None else 1,), (-1,),
                             lm.name, task, "fast", seed, 0, FAST_RECIPE)


def test_combine_sums_scaled_vectors_at_one_site(llama):
    a, b = _ltv(llama, comp.EN_FR, 0), _ltv(llama, comp.MASC_FEM, 1)
    (edit,) = comp.combine([a, b], [0.5, 2.0])
    assert (edit.layer, edit.position) == (1, -1)
    torch.testing.assert_close(edit.vector, 0.5 * a.vectors[0] + 2.0 * b.vectors[0])
    with pytest.raises(ValueError, match="different sites"):
        comp.combine([a, _ltv(llama, comp.MASC_FEM, 1, layer=0)], [1, 1])
    with pytest.raises(ValueError, match="one scale per vector"):
        comp.combine([a, b], [1.0])


def test_scorer_matches_evaluate_and_full_forward_log_probs(llama):
    data = comp.composition_data(run_sizes(get_profile("smoke")))
    scorer = comp.FormScorer(llama, data)
    edits = [VectorEdit(1, -1, torch.randn(llama.d_model, generator=torch.Generator().manual_seed(0)) * 5)]
    s = scorer.score(edits)
    es = EvalSet(llama, comp.COMPOSED, data.test, tail=None, cache_rows=False)
    ref = evaluate(es, edits)
    assert smallest_margin(es, edits) > PATH_GAP  # so the two paths' predictions agree (tests/margins.py)
    assert s["accuracy"] == ref.accuracy and s["predicted"] == ref.predicted
    assert s["accepted_accuracy"] >= s["accuracy"] and s["n"] == len(data.test)
    assert sum(s["form_choice"].values()) == pytest.approx(1.0)
    # the log-probability of one form, by a full forward over prompt + answer
    task, tok = get_task(comp.COMPOSED), llama.tokenizer
    lp = scorer.form_logprobs(edits)
    i = 0
    prompt = encode_prompts(tok, task, [data.test[i]]).full_rows()[0]
    ans = answer_ids(tok, task, [data.forms[i]["english_fem"][0]])[0]
    ids, mask = pad_left([prompt + ans], tok.pad_token_id)
    with torch.no_grad(), inject(llama, edits, attention_mask=mask[:, : len(prompt)]):
        logits, _ = forward_tokens(llama, ids, mask, logits_to_keep=0)
    logp = logits[0, len(prompt) - 1 : len(prompt) - 1 + len(ans)].float().log_softmax(-1)
    expected = sum(float(logp[j, t]) for j, t in enumerate(ans))
    assert lp["english_fem"][i] == pytest.approx(expected, abs=1e-3)


def test_icl_scorer_draws_clean_demonstrations(llama):
    data = comp.composition_data(run_sizes(get_profile("smoke")))
    scorer = comp.FormScorer(llama, data, shots=2, seed=0)
    pool = {e.input for e in data.splits[comp.COMPOSED].train}
    test_inputs = {e.input for e in data.test}
    for text, e in zip(scorer.prompts.texts, data.test):
        demos = [block.split("\n")[0][3:] for block in text.split("\n\n")[:-1]]
        assert len(demos) == 2 and set(demos) <= pool and not set(demos) & test_inputs
    assert scorer.score()["n"] == len(data.test)


def test_composition_result_end_to_end_and_cached(llama, cache):
    run = run_sizes(get_profile("smoke"))
    sizes = comp.CompositionSizes(seeds=(0, 1), scales=(0.5, 1.0), icl_shots=(2,), test_pairs=8)
    r = comp.composition_result(llama, run, sizes, seed=0)
    assert set(r["methods"]) == {"zero-shot", "2-shot ICL", "EN->FR", "M->F", "EN->FR + M->F",
                                 "random (norm of the sum)", "composed LTV"}
    for m in r["methods"].values():
        assert len(m["correct"]) == len(m["french_fem"]) == m["n"]
        assert sum(m["correct"]) / m["n"] == pytest.approx(m["accuracy"])
        assert sum(m["french_fem"]) / m["n"] == pytest.approx(m["form_choice"]["french_fem"])
    assert all(isinstance(v["trained"], bool) for v in r["vectors"].values())
    assert [(g["a"], g["b"]) for g in r["grid"]] == [(0.5, 0.5), (0.5, 1.0), (1.0, 0.5), (1.0, 1.0)]
    one = next(g for g in r["grid"] if g["a"] == 1.0 and g["b"] == 1.0)
    assert one["accuracy"] == r["methods"]["EN->FR + M->F"]["accuracy"]
    assert all(v["n_train"] > 0 for v in r["vectors"].values())
    assert set(r["cosine"]) == {"vectors", "vector minus start"}
    assert set(r["cosine"]["vectors"]) == {"composed, EN->FR + M->F", "composed, EN->FR", "composed, M->F", "EN->FR, M->F"}
    assert comp.composition_result(llama, run, sizes, seed=0) == r
    # both seeds' vectors trained together, into the cache entries a one-seed call reads
    assert len(list((cache / "vectors" / "ltv").glob("*.safetensors"))) == 6
    assert r["methods"]["zero-shot"]["n"] == 8
    again = comp.composition_ltv(llama, comp.EN_FR, run, comp.composition_data(run, test_pairs=8), seed=1)
    assert again.training.steps > 0 and again.seed == 1
    assert len(list((cache / "vectors" / "ltv").glob("*.safetensors"))) == 6


def test_first_token_clashes_are_reported(llama):
    data = comp.composition_data(run_sizes(get_profile("smoke")))
    # the tiny word-level tokenizer maps unknown French words to [UNK]: every form clashes with the gold
    clashes = comp.first_token_clashes(llama, data)
    assert clashes and all(c["form"] in comp.FORMS[1:] for c in clashes)
