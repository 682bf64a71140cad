"""ltvlib.study.generalization: sizes, similarity statistics, projections, the LTV's starting point, transfer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ltvlib.evaluate import EvalSet, evaluate
from ltvlib.ltv import FAST_RECIPE, LearnedTaskVector, train_ltv, with_config
from ltvlib.study import generalization as gen
from ltvlib.study.ltvs import ltv_accuracy, task_splits
from ltvlib.study.plans import generalization_sizes, get_profile, run_sizes
from ltvlib.tasks import PAPER_TASKS, load_splits
from tests.margins import PATH_GAP, smallest_margin


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    return tmp_path


def fake_ltv(lm, task: str, seed: int, scale: float = 3.0, layer: int | None = None) -> LearnedTaskVector:
    g = torch.Generator().manual_seed(1000 + seed + 17 * len(task))
    vec = torch.randn(1, lm.d_model, generator=g) * scale
    layer = lm.middle_layer if layer is None else layer
    return LearnedTaskVector(vec, (layer,), (-1,), lm.name, task, "fast", seed, 0, FAST_RECIPE)


def test_sizes_cover_the_paper_tasks_and_reuse_chapter_0s_seed():
    cpu = generalization_sizes(get_profile("cpu"))
    assert cpu.tasks == PAPER_TASKS
    assert all(0 in cpu.seeds_of(t) for t in cpu.tasks)
    # cpu: two seeds for five tasks; SNLI and RTE, the costliest to train, keep chapter 0's vector only
    assert [t for t in cpu.tasks if len(cpu.seeds_of(t)) >= 2] == [t for t in PAPER_TASKS if t not in ("snli", "rte")]
    assert cpu.seeds_of("antonym") == (0, 1) and cpu.seeds_of("snli") == (0,) and cpu.seeds_of("rte") == (0,)
    paper = generalization_sizes(get_profile("paper"))
    assert all(len(paper.seeds_of(t)) == 5 for t in paper.tasks)
    smoke = generalization_sizes(get_profile("smoke"))
    assert {"snli", "rte"} <= set(smoke.tasks)
    shifted = cpu.shifted(10)
    assert shifted.seeds_of("antonym") == (10, 11) and shifted.seeds_of("rte") == (10,)
    assert shifted.transfer_seeds == (10,)
    with pytest.raises(ValueError, match="not trained"):
        gen.GeneralizationSizes(tasks=("antonym",), seeds=(0,), transfer_seeds=(0, 1))
    with pytest.raises(ValueError, match="not trained"):
        gen.GeneralizationSizes(tasks=("antonym",), seeds=(0,), fewer_seeds=(("antonym", (1,)),))
    with pytest.raises(ValueError, match="unknown task"):
        gen.GeneralizationSizes(tasks=("nope",), seeds=(0,))


def test_similarity_summary_of_two_clear_clusters():
    e = torch.eye(4)
    x = torch.stack([e[0], e[0] + 0.1 * e[2], e[1], e[1] + 0.1 * e[3], e[2]])
    groups = ["a", "a", "b", "b", "c"]
    cos = gen.cosine_matrix(x)
    torch.testing.assert_close(cos.diagonal(), torch.ones(5, dtype=torch.float64))
    s = gen.similarity_summary(groups, cos)
    within = 1 / math.sqrt(1.01)
    assert s["within"] == pytest.approx(within)
    assert s["within_by_group"] == pytest.approx({"a": within, "b": within})
    # across pairs: (a0,a1) vs (b0,b1): 0; a1-c: 0.1/sqrt(1.01); everything else 0
    assert s["across"] == pytest.approx((0.1 / math.sqrt(1.01)) / 8)
    assert s["nearest_same_group"] == 1.0  # the lone "c" is not counted
    mixed = gen.similarity_summary(["a", "b", "a", "b", "c"], cos)
    assert mixed["nearest_same_group"] == 0.0 and mixed["within"] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="shape"):
        gen.similarity_summary(groups[:3], cos)


def test_pca_recovers_a_plane_and_is_deterministic():
    g = torch.Generator().manual_seed(0)
    basis = torch.linalg.qr(torch.randn(20, 2, generator=g))[0]  # (20, 2) orthonormal
    coef = torch.randn(12, 2, generator=g) * torch.tensor([5.0, 1.0])
    x = coef @ basis.T + 3.0
    coords, ratio = gen.pca_2d(x)
    assert ratio.sum() == pytest.approx(1.0) and ratio[0] > ratio[1]
    # distances between points are preserved exactly by the projection onto their own plane
    d_in = torch.cdist(x.double(), x.double()).numpy()
    d_out = np.linalg.norm(coords[:, None] - coords[None], axis=-1)
    np.testing.assert_allclose(d_out, d_in, atol=1e-8)
    np.testing.assert_array_equal(gen.pca_2d(x)[0], coords)
    one, r1 = gen.pca_2d(torch.ones(1, 5))
    assert one.shape == (1, 2) and r1.tolist() == [0.0, 0.0]


def test_tsne_is_none_without_scikit_learn(monkeypatch):
    monkeypatch.setattr(gen, "tsne_available", lambda: False)
    assert gen.tsne_2d(torch.randn(6, 4)) is None


def test_tsne_gives_two_coordinates_per_vector():
    pytest.importorskip("sklearn")
    x = torch.cat([torch.randn(4, 8) + 5 * torch.eye(8)[0], torch.randn(4, 8) - 5 * torch.eye(8)[0]])
    coords = gen.tsne_2d(x, seed=0)
    assert coords.shape == (8, 2)
    np.testing.assert_allclose(gen.tsne_2d(x, seed=0), coords)


def test_stack_vectors_needs_one_site(llama):
    a, b = fake_ltv(llama, "antonym", 0), fake_ltv(llama, "capital", 0)
    keys, x = gen.stack_vectors({("antonym", 0): a, ("capital", 0): b})
    assert keys == [("antonym", 0), ("capital", 0)] and x.shape == (2, llama.d_model)
    with pytest.raises(ValueError, match="different sites"):
        gen.stack_vectors({("antonym", 0): a, ("capital", 0): fake_ltv(llama, "capital", 0, layer=0)})
    two = LearnedTaskVector(torch.zeros(2, llama.d_model), (0, 1), (-1,), llama.name, "antonym", "fast", 0, 0,
                            FAST_RECIPE)
    with pytest.raises(ValueError, match="2 sites"):
        gen.single_site_vector(two)


def test_initial_vectors_are_train_ltvs_starting_point(llama):
    splits = load_splits("antonym", n_train=16, n_val=8)
    frozen = with_config(FAST_RECIPE, lr=0.0, epochs=1, samples_per_epoch=16)
    for seed in (0, 3):
        ltv = train_ltv(llama, "antonym", layers=[1], recipe=frozen, seed=seed, splits=splits, progress=False)
        torch.testing.assert_close(gen.initial_vectors(ltv), ltv.vectors)


def test_shared_labels():
    assert gen.shared_labels("snli", "rte") == ("True", "False")
    assert gen.shared_labels("sst2", "rte") == ()
    assert gen.shared_labels("antonym", "rte") == () and gen.shared_labels("rte", "antonym") == ()


def test_transfer_on_the_diagonal_equals_ltv_accuracy(llama, cache):
    run = run_sizes(get_profile("smoke"))
    ltv = fake_ltv(llama, "sst2", 0, scale=20.0)
    own = ltv_accuracy(llama, ltv, run)
    r = gen.transfer_accuracy(llama, ltv, "sst2", run)
    # two paths over the same prompts: exact agreement holds since no prediction is near a tie (tests/margins.py)
    ref = EvalSet(llama, "sst2", task_splits("sst2", run).test, tail=None, cache_rows=False)
    assert smallest_margin(ref, ltv.edits()) > PATH_GAP
    assert r["accuracy"] == own["accuracy"] and r["label_accuracy"] == own["label_accuracy"] and r["n"] == own["n"]


def test_transfer_is_the_targets_evaluation_with_the_sources_vector(llama, cache):
    run = run_sizes(get_profile("smoke"))
    ltv = fake_ltv(llama, "antonym", 1, scale=20.0)
    r = gen.transfer_accuracy(llama, ltv, "sst2", run)
    # an independent evaluation: full forwards over the whole prompt, nothing cached
    es = EvalSet(llama, "sst2", task_splits("sst2", run).test, tail=None, cache_rows=False)
    ref = evaluate(es, ltv.edits())
    assert smallest_margin(es, ltv.edits()) > PATH_GAP  # so the two paths' predictions agree (tests/margins.py)
    assert r["accuracy"] == ref.accuracy and r["label_accuracy"] == ref.label_accuracy
    assert r["n"] == len(task_splits("sst2", run).test)
    assert sum(share for _, share in r["top_predictions"]) <= 1.0
    assert r["source"] == "antonym" and r["target"] == "sst2" and r["seed"] == 1
    again = gen.transfer_accuracy(llama, ltv, "sst2", run)
    assert again == r and len(list((cache / "results" / "ltv-transfer").glob("*.json"))) == 1
    gen_target = gen.transfer_accuracy(llama, ltv, "capital", run)
    assert gen_target["label_accuracy"] is None


def test_transfer_matrix_covers_every_pair(llama, cache):
    run = run_sizes(get_profile("smoke"))
    sizes = gen.GeneralizationSizes(tasks=("antonym", "sst2"), seeds=(0, 1), fewer_seeds=(("sst2", (0,)),))
    ltvs = {(t, s): fake_ltv(llama, t, s) for t in sizes.tasks for s in sizes.seeds_of(t)}
    rows = gen.transfer_matrix(llama, ltvs, run, sizes)
    assert {(r["source"], r["target"]) for r in rows} == {(a, b) for a in sizes.tasks for b in sizes.tasks}
    # every seed on its own task, the transfer seeds elsewhere
    assert sorted((r["source"], r["target"], r["seed"]) for r in rows) == [
        ("antonym", "antonym", 0), ("antonym", "antonym", 1), ("antonym", "sst2", 0), ("sst2", "antonym", 0),
        ("sst2", "sst2", 0)]
    with pytest.raises(ValueError, match="last-position"):
        bad = LearnedTaskVector(torch.zeros(1, llama.d_model), (1,), (0,), llama.name, "antonym", "fast", 0, 0,
                                FAST_RECIPE)
        gen.transfer_accuracy(llama, bad, "sst2", run)


def test_transfer_keeps_per_query_correctness(llama, cache):
    run = run_sizes(get_profile("smoke"))
    r = gen.transfer_accuracy(llama, fake_ltv(llama, "antonym", 1, scale=20.0), "sst2", run)
    assert len(r["correct"]) == len(r["label_correct"]) == r["n"]
    assert sum(r["correct"]) / r["n"] == pytest.approx(r["accuracy"])
    assert sum(r["label_correct"]) / r["n"] == pytest.approx(r["label_accuracy"])


def test_random_transfer_draws_vectors_of_the_ltvs_norm(llama, cache, monkeypatch):
    run = run_sizes(get_profile("smoke"))
    ltv = fake_ltv(llama, "antonym", 0, scale=20.0)
    seen = []
    real = gen.evaluate

    def spy(es, edits=()):
        seen.append([e.vector.clone() for e in edits])
        return real(es, edits)

    monkeypatch.setattr(gen, "evaluate", spy)
    draws = gen.random_transfer(llama, ltv, "sst2", run, n_draws=3, seed=4)
    assert [d["draw"] for d in draws] == [0, 1, 2] and all(len(d["correct"]) == d["n"] for d in draws)
    assert len(seen) == 3
    for v in seen:
        assert float(v[0].norm()) == pytest.approx(float(ltv.vectors.norm()), rel=1e-5)
    assert not torch.allclose(seen[0][0], seen[1][0])
    assert gen.random_transfer(llama, ltv, "sst2", run, n_draws=3, seed=4) == draws and len(seen) == 3  # cached
    with pytest.raises(ValueError, match="n_draws"):
        gen.random_transfer(llama, ltv, "sst2", run, n_draws=0)


def test_cluster_gap_interval_and_permutation_control():
    # three groups of three (with groups of two, 1 in 15 shufflings gives back the true grouping: p >= 0.07)
    groups = ["a"] * 3 + ["b"] * 3 + ["c"] * 3
    x = torch.tensor([[1.0, 0, 0], [0.9, 0.1, 0], [0.95, 0, 0.1], [0, 1.0, 0], [0.1, 0.9, 0], [0, 0.95, 0.1],
                      [0, 0, 1.0], [0, 0.1, 0.9], [0.1, 0, 0.95]])
    cos = gen.cosine_matrix(x)
    gaps = gen.task_gaps(groups, cos)
    assert set(gaps) == {"a", "b", "c"} and all(g > 0.8 for g in gaps.values())
    est = gen.gap_interval(groups, cos, n_resamples=500)
    assert est.n == 3 and est.seeds == 3 and 0 < est.low <= est.value <= est.high
    perm = gen.gap_permutation(groups, cos, n_permutations=199)
    assert perm.value == pytest.approx(gen.cluster_gap(groups, cos)) and perm.value > perm.high
    margin = gen.control_margin(perm, n=9)
    assert margin.low > 0 and margin.value == pytest.approx(perm.value - perm.mean)
    # unstructured vectors: the gap sits among the shuffled ones
    rand = gen.cosine_matrix(torch.randn(9, 50, generator=torch.Generator().manual_seed(0)))
    noise = gen.control_margin(gen.gap_permutation(groups, rand, n_permutations=199), n=9)
    assert noise.low < 0 < noise.high
    with pytest.raises(ValueError, match="two groups"):
        gen.gap_interval(["a", "a", "b"], gen.cosine_matrix(x[:3]))
