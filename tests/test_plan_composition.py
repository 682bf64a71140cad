"""Chapter 06's composition in the cost plan: :func:`ltvlib.study.cost.form_score_cost` against
``torch.utils.flop_counter.FlopCounterMode``'s count of the same scores on the tiny model (within the plan's 10 %),
and the chapter's row holding what the chapter runs."""

from __future__ import annotations

import pytest
import torch
from models_fixtures import tiny_llama

from ltvlib.flops import model_shape, shape_from_config
from ltvlib.inject import VectorEdit
from ltvlib.study import composition as comp
from ltvlib.study.cost import (
    LTVCounter,
    composition_cost,
    form_lengths,
    form_score_cost,
    task_lengths,
    tokenizer_counter,
)
from ltvlib.study.plans import generalization_plan, get_profile, run_sizes
from tests.test_plan import _check, _counted


@pytest.mark.parametrize("shots, vector_scores", [(0, 0), (0, 3), (2, 0)])
def test_form_scores_estimate_matches_the_counted_flops(shots, vector_scores):
    """One scorer of the composed test queries: its prompts, the score without a vector, then ``vector_scores``
    scores with a vector entering block 1 (the first of them keeps the states below that block)."""
    lm = tiny_llama()
    data = comp.composition_data(run_sizes(get_profile("smoke")), test_pairs=24)
    vectors = [[VectorEdit(1, -1, 0.1 * lm.model.get_input_embeddings().weight[i].detach())] for i in range(5, 8)]

    def run() -> list:
        scorer = comp.FormScorer(lm, data, shots=shots, seed=0)
        return [scorer.score(), *(scorer.score(v) for v in vectors[:vector_scores])]

    with torch.no_grad():
        measured, _ = _counted(run)
    estimate = form_score_cost(shape_from_config(lm.model.config, lm.name),
                               form_lengths(data, *tokenizer_counter(lm.tokenizer)),
                               shots=shots, vector_scores=vector_scores, layer=1)
    _check(estimate.flops, measured)


def test_composition_counts_three_ltvs_per_seed_and_every_score():
    """Every seed trains the three tasks' LTVs on their cleaned splits and scores the composed queries with each
    method: more seeds, ICL shot counts or grid scales cost more."""
    shape = model_shape("smollm2-135m")
    profile = get_profile("cpu")
    rs = run_sizes(profile)
    sizes = generalization_plan("cpu").composition

    def cost(s) -> tuple[float, int]:
        counter = LTVCounter(shape, task_lengths, rs)
        return composition_cost(shape, s, rs, counter, None).flops, len(counter.trained)

    base, trained = cost(sizes)
    assert trained == 3 * len(sizes.seeds)
    more_seeds, _ = cost(type(sizes)(seeds=(*sizes.seeds, 99), scales=sizes.scales, icl_shots=sizes.icl_shots,
                                     test_pairs=sizes.test_pairs))
    grid, _ = cost(type(sizes)(seeds=sizes.seeds, scales=(0.5, 1.0), icl_shots=sizes.icl_shots,
                               test_pairs=sizes.test_pairs))
    no_icl, _ = cost(type(sizes)(seeds=sizes.seeds, scales=sizes.scales, icl_shots=(),
                                 test_pairs=sizes.test_pairs))
    assert more_seeds > base and grid > base and no_icl < base
