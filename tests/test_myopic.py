"""The myopic-reward behaviour task: directions, the letter-balanced held-out set, A/B scores, generation."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from ltvlib.evaluate import EvalSet, evaluate
from ltvlib.inject import VectorEdit
from ltvlib.myopic import (
    DIRECTIONS,
    ABScores,
    answer_tokens,
    balanced_test,
    check_no_leak,
    cut_at,
    direction_splits,
    direction_task,
    extraction_configs,
    greedy_continuations,
    item_p_myopic,
    letter_balanced,
    ltv_profile,
    ltv_splits,
    method_label,
    method_names,
    method_scores,
    myopic_sizes,
    open_question,
    other_letter,
    score_ab,
    summarise_ab,
    toward,
)
from ltvlib.prefix import forward_tokens
from ltvlib.profiles import get_profile
from ltvlib.prompts import pad_left
from ltvlib.tasks import Example, get_task, load_splits


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("task", ["myopic", "myopic_lm"])
def test_non_myopic_task_has_the_same_split_with_the_other_letter(task):
    my, other = load_splits(direction_task(task, "myopic")), load_splits(direction_task(task, "non_myopic"))
    assert direction_task(task, "myopic") is get_task(task)
    assert direction_task(task, "non_myopic").name == f"{task}_non_myopic"
    for a, b in ((my.train, other.train), (my.validation, other.validation), (my.test, other.test)):
        assert [e.input for e in a] == [e.input for e in b] and len(a) > 0
        assert all(y.output == other_letter(x.output) for x, y in zip(a, b))


def test_bad_task_or_direction():
    with pytest.raises(ValueError, match="not a myopic-reward task.*allowed: myopic, myopic_lm"):
        direction_task("sst2", "myopic")
    with pytest.raises(ValueError, match="unknown direction 'sideways'"):
        direction_task("myopic", "sideways")
    with pytest.raises(ValueError, match="unknown direction"):
        toward([], "up")
    with pytest.raises(ValueError, match="expected a letter"):
        other_letter("C")
    with pytest.raises(ValueError, match="unknown method 'lora'"):
        method_label("lora")
    assert method_label("icl5") == "ICL 5-shot" and method_label("ltv") == "LTV"


def test_balanced_test_is_balanced_alternating_and_held_out():
    test = balanced_test("myopic")
    split = load_splits("myopic").test
    counts = {x: sum(e.output == x for e in split) for x in "AB"}
    assert len(test) == 2 * min(counts.values())
    assert [e.output for e in test[:6]] == ["A", "B"] * 3
    assert sum(e.output == "A" for e in test) == len(test) // 2
    assert set(test) <= set(split)
    assert balanced_test("myopic", 10) == test[:10]
    check_no_leak("myopic", test)
    with pytest.raises(AssertionError, match="held-out questions occur"):
        check_no_leak("myopic", load_splits("myopic").validation[-3:])
    with pytest.raises(ValueError, match="even"):
        balanced_test("myopic", 7)
    with pytest.raises(ValueError, match="exceed the largest letter-balanced test split of"):
        balanced_test("myopic", len(test) + 2)
    flipped = toward(test[:4], "non_myopic")
    assert [e.output for e in flipped] == ["B", "A", "B", "A"] and flipped[0].input == test[0].input


def test_letter_balanced_takes_the_first_of_each_letter_in_order():
    ex = [Example(f"q{i}", x) for i, x in enumerate("AAABAB")]
    assert [e.input for e in letter_balanced(ex)] == ["q0", "q3", "q1", "q5"]
    assert letter_balanced(ex, 2) == letter_balanced(ex)[:2] and letter_balanced(ex, 0) == ()
    with pytest.raises(ValueError, match="letter-balanced questions must be a non-negative even number"):
        letter_balanced(ex, 3, what="questions")
    with pytest.raises(ValueError, match="6 items exceed the largest letter-balanced set of 4 \\(4 A, 2 B\\)"):
        letter_balanced(ex, 6)


def test_ltv_splits_train_on_the_profile_sizes_and_stop_on_balanced_questions():
    prof = get_profile("cpu")
    sizes = myopic_sizes(prof)
    assert ltv_profile(prof, sizes).n_train == sizes.ltv_n_train and ltv_profile(prof, sizes).n_val == sizes.ltv_n_val
    for d in DIRECTIONS:
        s = ltv_splits(d, prof, sizes)
        region = load_splits(direction_task("myopic", d), n_train=10**9, n_val=10**9)
        assert s.train == region.train[: sizes.ltv_n_train]
        assert len(s.validation) == sizes.ltv_n_val and set(s.validation) <= set(region.validation)
        assert sum(e.output == "A" for e in s.validation) == sizes.ltv_n_val // 2
        assert s.test == region.test
    # both directions stop on the same questions, with swapped letters (in another order: each alternates A, B)
    my, other = ltv_splits("myopic", prof, sizes), ltv_splits("non_myopic", prof, sizes)
    assert {(e.input, other_letter(e.output)) for e in my.validation} == {(e.input, e.output) for e in other.validation}
    # None keeps the profile's sizes
    plain = replace(sizes, ltv_n_train=None, ltv_n_val=None)
    assert ltv_profile(prof, plain) == prof


def test_extraction_configs_use_the_task_template_and_the_shot_override():
    prof = get_profile("cpu")
    vtv, fv = extraction_configs(prof, myopic_sizes(prof))
    assert vtv.template == "task" and vtv.form == "replace"
    assert vtv.shots == fv.shots == myopic_sizes(prof).extract_shots
    vtv, fv = extraction_configs(prof, replace(myopic_sizes(prof), extract_shots=None))
    assert (vtv.shots, fv.shots) == (5, 10)


def test_open_question():
    ex = balanced_test("myopic", 2)[0]
    q = open_question(ex)
    assert q and "Choices" not in q and ex.input.startswith(q)
    with pytest.raises(ValueError, match="no '\\\\n\\\\nChoices:' block"):
        open_question(Example("Which would you prefer?", "A"))


def test_cut_at_skips_leading_blank_lines():
    assert cut_at("\n\nI would wait.\n\nQ: next", "\n\n") == "\n\nI would wait."
    assert cut_at(" B) now\n\nQ:", "\n\n") == " B) now"
    assert cut_at("a\n\nb", None) == "a\n\nb"


def test_summary_on_hand_made_scores():
    # item 1: myopic A, model prefers A (top-1 A); item 2: myopic B, model prefers A (top-1 something else)
    scores = ABScores(p_a=[0.6, 0.3], p_b=[0.2, 0.1], top_label=["A", None], top_token=["A", "x"])
    my = summarise_ab(scores, ["A", "B"], "myopic")
    assert my["all"]["p_myopic"] == pytest.approx((0.75 + 0.25) / 2)
    assert my["all"]["ab_accuracy"] == 0.5 and my["all"]["myopic_choice"] == 0.5
    assert my["all"]["accuracy"] == 0.5 and my["all"]["says_a"] == 1.0
    assert my["all"]["ab_mass"] == pytest.approx((0.8 + 0.4) / 2) and my["all"]["n"] == 2
    assert my["myopic=A"]["ab_accuracy"] == 1.0 and my["myopic=B"]["ab_accuracy"] == 0.0
    other = summarise_ab(scores.to_dict(), ["A", "B"], "non_myopic")
    assert other["all"]["ab_accuracy"] == 0.5 and other["myopic=B"]["ab_accuracy"] == 1.0
    assert other["all"]["accuracy"] == 0.0  # the top token is never the non-myopic letter
    assert other["all"]["p_myopic"] == my["all"]["p_myopic"]  # the probability does not depend on direction
    assert item_p_myopic(scores, ["A", "B"]) == pytest.approx([0.75, 0.25])
    assert item_p_myopic(ABScores([0.0], [0.0], [None], ["x"]), ["B"]) == [0.5]
    with pytest.raises(ValueError, match="1 myopic letters for 2 scored items"):
        item_p_myopic(scores, ["A"])
    with pytest.raises(ValueError, match="myopic letters must be in"):
        item_p_myopic(scores, ["A", "b"])
    with pytest.raises(ValueError, match="1 myopic letters for 2 scored items"):
        summarise_ab(scores, ["A"], "myopic")
    with pytest.raises(ValueError, match="myopic letters must be in"):
        summarise_ab(scores, ["A", "C"], "myopic")


def test_score_ab_agrees_with_evaluate(llama):
    test = balanced_test("myopic", 6)
    es = EvalSet(llama, "myopic", test)
    edit = [VectorEdit(1, -1, torch.randn(llama.d_model, generator=torch.Generator().manual_seed(0)))]
    for edits in ((), edit):
        s = score_ab(es, edits, batch_size=4)
        r = evaluate(es, edits)
        gold = [a if e.output == "A" else b for a, b, e in zip(s.p_a, s.p_b, test)]
        assert gold == pytest.approx(r.gold_prob, rel=1e-5)
        assert [t == e.output for t, e in zip(s.top_label, test)] == r.correct
        summary = summarise_ab(s, [e.output for e in test], "myopic")
        assert summary["all"]["ab_accuracy"] == pytest.approx(r.label_accuracy)
    with pytest.raises(ValueError, match="needs an A/B task"):
        score_ab(EvalSet(llama, "antonym", load_splits("antonym").test[:2]))


@pytest.mark.parametrize("model", ["llama", "gemma"])
def test_greedy_generation_matches_full_recompute_and_batching(model, request):
    lm = request.getfixturevalue(model)
    texts = ["Q: hot\nA:", "Q: a very long and slow film\nA:"]
    got = greedy_continuations(lm, texts, max_new_tokens=4, stop=None)
    alone = [greedy_continuations(lm, [t], max_new_tokens=4, stop=None)[0] for t in texts]
    assert got == alone
    # reference: recompute the whole sequence for every new token, no cache
    for text, cont in zip(texts, got):
        rows = [list(lm.tokenizer(text).input_ids)]
        for _ in range(4):
            ids, mask = pad_left(rows, lm.tokenizer.pad_token_id)
            rows[0].append(int(forward_tokens(lm, ids, mask)[0][0, -1].argmax()))
        new = rows[0][len(lm.tokenizer(text).input_ids):]
        eos = lm.tokenizer.eos_token_id
        assert cont == lm.tokenizer.decode(new[: new.index(eos)] if eos in new else new)
    zero = [VectorEdit(1, -1, torch.zeros(lm.d_model))]
    assert greedy_continuations(lm, texts, zero, max_new_tokens=4, stop=None) == got
    push = [VectorEdit(1, -1, 50 * torch.randn(lm.d_model, generator=torch.Generator().manual_seed(1)))]
    assert greedy_continuations(lm, texts, push, max_new_tokens=4, stop=None) != got
    with pytest.raises(ValueError, match="max_new_tokens must be at least 1"):
        greedy_continuations(lm, texts, max_new_tokens=0)
    assert greedy_continuations(lm, [], max_new_tokens=2) == []


def test_method_scores_run_cache_and_check_arguments(llama, cache):
    import dataclasses

    from ltvlib.ltv import with_config

    # the smoke recipe's two stream-relative steps barely move a vector in the tiny model's stream (RMS ~0.03):
    # neither direction's LTV would beat its start, and both would be the same starting vector. Steps of about
    # the old absolute 0.1 (4 x the tiny stream) make them train.
    smoke = get_profile("smoke")
    prof = dataclasses.replace(smoke, recipe=with_config(smoke.recipe, lr=4.0, init_range=4.0))
    sizes = myopic_sizes(prof)
    assert method_names(sizes) == ["zero_shot", "icl2", "vanilla_tv", "vanilla_tv_difference", "function_vector", "ltv"]
    n = len(balanced_test(sizes.task, sizes.n_test))
    for method in method_names(sizes):
        for direction in [None] if method == "zero_shot" else DIRECTIONS:
            r = method_scores(llama, prof, method, direction)
            assert len(r["scores"]["p_a"]) == len(r["myopic_letters"]) == n
            assert all(0 <= a + b <= 1 + 1e-6 for a, b in zip(r["scores"]["p_a"], r["scores"]["p_b"]))
            assert method_scores(llama, prof, method, direction) == r
    ltv = method_scores(llama, prof, "ltv", "non_myopic")
    assert ltv["info"]["layer"] == llama.middle_layer and ltv["info"]["steps"] > 0
    tv = method_scores(llama, prof, "vanilla_tv", "myopic")
    assert tv["info"]["layer"] in range(llama.n_layers)
    # the two directions' vectors were trained on different labels, so they differ
    assert method_scores(llama, prof, "ltv", "myopic")["scores"] != ltv["scores"]
    with pytest.raises(ValueError, match="zero-shot scores have no direction"):
        method_scores(llama, prof, "zero_shot", "myopic")
    with pytest.raises(ValueError, match="needs direction"):
        method_scores(llama, prof, "ltv", None)
    with pytest.raises(ValueError, match="unknown direction"):
        method_scores(llama, prof, "ltv", "left")


def test_direction_splits_follow_the_profile():
    prof = get_profile("smoke")
    s = direction_splits("myopic", "non_myopic", prof)
    assert len(s.train) == prof.n_train and len(s.validation) == prof.n_val


def test_letters_are_distinct_tokens(llama):
    ids = answer_tokens(llama, "myopic")
    assert ids["A"][0] != ids["B"][0]
