"""Chapter 07's cost plan (:func:`ltvlib.study.cost.myopic_cost`) against what torch counts: on the tiny model, each
kind of :func:`ltvlib.study.myopic.behaviour_scores` call (zero-shot, ICL, an extracted vector with its extraction,
the LTV and a random vector with their judged greedy answers) run under ``torch.utils.flop_counter.FlopCounterMode``
(``bench/floor.py``'s count) in the chapter's order, and the plan's estimate of the same call within 10 %; and the
chapter's row counts both directions' vectors and every method's scores."""

from __future__ import annotations

import dataclasses

import pytest
from models_fixtures import tiny_llama

from ltvlib.flops import Cost, model_shape
from ltvlib.ltv import with_config
from ltvlib.study import plans as P
from ltvlib.study.cost import (
    Lengths,
    behaviour_cell_cost,
    chapter_costs,
    function_vector_cost,
    myopic_lengths_of,
    tokenizer_counter,
    vanilla_tv_cost,
)
from ltvlib.study.ltvs import sweep_with_middle
from ltvlib.study.myopic import balanced_test, behaviour_scores, direction_ltv, direction_splits, extraction_configs
from ltvlib.tasks import get_task
from tests.test_plan import TOLERANCE, _check, _counted, _shape

JUDGED = ("zero_shot", "icl2", "ltv", "random")
# 68 items: two letter-score forwards of 64, three option-text forwards of 32 per order; 34 judged: two batches
SIZES = dataclasses.replace(P.myopic_sizes(P.get_profile("smoke")), n_test=68, judge_items=34, judge_new_tokens=4,
                            judge_methods=JUDGED)


@pytest.fixture(scope="module")
def chapter(tmp_path_factory):
    """The chapter's cells on a fresh tiny model (its own prompt-set memo), each counted: zero-shot first (it builds
    the sets every vector reuses), then toward the myopic answer ICL, the Vanilla TV (extracted in the cell), the
    function vector (extracted in the cell), the LTV (trained before, outside the count) and one random vector."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LTV_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        lm = tiny_llama(seed=70)
        smoke = P.run_sizes(P.get_profile("smoke"))
        # steps large enough to move a vector in the tiny model's stream (as tests/test_myopic.py trains them)
        run = dataclasses.replace(smoke, recipe=with_config(smoke.recipe, lr=4.0, init_range=4.0))
        direction_ltv(lm, "myopic", run, SIZES)
        measured, records = {}, {}
        for name, method, direction, draw in (("zero_shot", "zero_shot", None, 0), ("icl", "icl2", "myopic", 0),
                                              ("vanilla_tv", "vanilla_tv", "myopic", 0),
                                              ("function_vector", "function_vector", "myopic", 0),
                                              ("ltv", "ltv", "myopic", 0), ("random", "random", "myopic", 1)):
            measured[name], records[name] = _counted(
                lambda m=method, d=direction, k=draw: behaviour_scores(lm, run, m, d, sizes=SIZES, draw=k))
        test = balanced_test(SIZES.task, SIZES.n_test)
        pool = list(direction_splits(SIZES.task, "myopic", run).train)
        count, special = tokenizer_counter(lm.tokenizer)
        ab, text_a, text_b = myopic_lengths_of(SIZES.task, test, pool, count, special)
        yield {"lm": lm, "run": run, "measured": measured, "records": records, "ab": ab, "text": (text_a, text_b),
               "train": Lengths.of(get_task(SIZES.task), pool, count, special)}


def _cell(ch, method: str, **kw) -> float:
    return behaviour_cell_cost(_shape(ch["lm"]), ch["ab"], ch["text"], judged=SIZES.judge_items if method in JUDGED
                               else 0, new_tokens=SIZES.judge_new_tokens, **kw).flops


def test_lengths_follow_the_prompts_the_sets_hold(chapter):
    """The held-out prompts' lengths the plan counts are the scored sets' own (no demonstrations here)."""
    ab, (text_a, text_b) = chapter["ab"], chapter["text"]
    assert len(ab.queries) == len(text_a.queries) == SIZES.n_test
    assert text_a.queries == text_b.queries and text_a.answers != text_b.answers
    assert all(a >= 1 for a in text_a.answers + text_b.answers)


def test_zero_shot_cell_matches_the_counted_flops(chapter):
    """The letters as given and swapped, the option text in both orders (every prompt in full, each option's tail),
    and greedy answers on the first judged items."""
    _check(_cell(chapter, "zero_shot"), chapter["measured"]["zero_shot"], "zero-shot")


def test_icl_cell_matches_the_counted_flops(chapter):
    """ICL: its own sets, the demonstration blocks once per set, the letter sets not cached."""
    demo_sets = chapter["run"].icl_demo_sets
    assert demo_sets and demo_sets > 1
    estimate = _cell(chapter, "icl2", shots=2, demo_sets=demo_sets)
    _check(estimate, chapter["measured"]["icl"], "ICL")
    # the demonstrations are what tells it apart: the same cell priced without them misses the count
    assert abs(_cell(chapter, "zero_shot") / chapter["measured"]["icl"] - 1) > TOLERANCE


def test_extracted_vector_cells_match_the_counted_flops(chapter):
    """The Vanilla TV's cell extracts it (its layer chosen among the sweep layers) and scores it at its layer, after
    the pass that keeps the zero-shot sets' streams (the first vector past block 0 makes it); the function vector's
    cell extracts it and scores it at its layer."""
    lm, run = chapter["lm"], chapter["run"]
    shape, train = _shape(lm), chapter["train"]
    vtv, fv = extraction_configs(run, SIZES)
    tv_layer = chapter["records"]["vanilla_tv"]["info"]["layer"]
    fv_layer = chapter["records"]["function_vector"]["info"]["layer"]
    assert fv_layer == lm.n_layers // 3
    tv = vanilla_tv_cost(shape, train, vtv, sweep_with_middle(lm.n_layers, run)).flops
    tv += _cell(chapter, "vanilla_tv", layer=tv_layer, states=tv_layer > 0)
    _check(tv, chapter["measured"]["vanilla_tv"], f"Vanilla TV (block {tv_layer})")
    fv_cost = function_vector_cost(shape, train, fv).flops
    fv_cost += _cell(chapter, "function_vector", layer=fv_layer, states=tv_layer == 0)
    _check(fv_cost, chapter["measured"]["function_vector"], "function vector")


def test_ltv_and_random_cells_match_the_counted_flops(chapter):
    """A vector read from the cache: the tails from the middle block and greedy answers with the vector."""
    mid = chapter["lm"].middle_layer
    for name in ("ltv", "random"):
        estimate = _cell(chapter, name, layer=mid)
        _check(estimate, chapter["measured"][name], name)
        # the judged answers are what tells it apart: the cell priced without them misses the count
        unjudged = behaviour_cell_cost(_shape(chapter["lm"]), chapter["ab"], chapter["text"], layer=mid).flops
        assert abs(unjudged / chapter["measured"][name] - 1) > TOLERANCE


def test_chapter_row_counts_both_directions_extractions_and_every_cell(monkeypatch):
    """The ``cpu`` row of chapter 07 on SmolLM2: two LTVs and two pairs of extracted vectors at least, every random
    draw a cell of its own, and the judged answers of the plan's methods."""
    from ltvlib.study.cost import LTVCounter, myopic_lengths, task_lengths

    shape = model_shape("smollm2-135m")
    mid = shape.n_layers // 2
    plan = P.myopic_plan("cpu")
    ms, rs = plan.sizes, plan.run_sizes
    cost = chapter_costs(shape, "cpu")["07"].flops
    train = task_lengths(ms.task)
    vtv, fv = extraction_configs(rs, ms)
    extraction = (vanilla_tv_cost(shape, train, vtv, sweep_with_middle(shape.n_layers, rs)).flops
                  + function_vector_cost(shape, train, fv).flops)
    one_ltv = LTVCounter(shape, task_lengths, rs)
    c = Cost()
    one_ltv(c, ms.task, mid, 0, recipe=with_config(rs.recipe, patience=ms.ltv_patience), n_train=ms.ltv_n_train,
            n_val=ms.ltv_n_val)
    ab, text_a, text_b = myopic_lengths(ms.task, ms.n_test, None)
    zero = behaviour_cell_cost(shape, ab, (text_a, text_b)).flops
    assert c.flops > 0 and extraction > 0
    assert cost > 2 * c.flops + 2 * extraction + zero

    # each random draw is a vector scored in both directions, its answers judged
    ms_cpu = P.MYOPIC_SIZES["cpu"]
    assert ms_cpu.random_draws > 0 and "random" in (ms_cpu.judge_methods or ("random",))
    per_draw = behaviour_cell_cost(shape, ab, (text_a, text_b), layer=mid, judged=ms_cpu.judge_items or ms_cpu.n_test,
                                   new_tokens=ms_cpu.judge_new_tokens).flops
    monkeypatch.setitem(P.MYOPIC_SIZES, "cpu", dataclasses.replace(ms_cpu, random_draws=0))
    fewer = chapter_costs(shape, "cpu")["07"].flops
    assert cost - fewer == pytest.approx(2 * ms_cpu.random_draws * per_draw, rel=1e-9)
    # judging only the zero-shot answers drops the ICL, LTV and random vectors' greedy answers
    monkeypatch.setitem(P.MYOPIC_SIZES, "cpu", dataclasses.replace(ms_cpu, judge_methods=("zero_shot",)))
    quiet = chapter_costs(shape, "cpu")["07"].flops
    assert quiet < cost
