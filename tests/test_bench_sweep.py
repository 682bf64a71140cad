"""bench/sweep.py: the jobs follow the profile's layers (or the layer sets given, ``a+b`` for one LTV at both); with
--seeds-together consecutive seeds of one (task, layers) form one group, nothing else does."""

from __future__ import annotations

import argparse

from ltvlib.study.plans import get_profile, ltv_layers
from tests.bench_scripts import load_bench

sweep = load_bench("sweep")


def test_groups_join_consecutive_seeds_of_one_task_and_layer_only():
    jobs = [("a", 0, 0), ("a", 15, 0), ("b", 15, 1), ("b", 15, 2), ("c", 15, 0), ("c", 15, 1), ("c", 15, 2),
            ("c", 17, 0), ("a", 15, 1)]
    assert sweep._groups(jobs, together=True) == [
        [("a", 0, 0)], [("a", 15, 0)], [("b", 15, 1), ("b", 15, 2)], [("c", 15, 0), ("c", 15, 1), ("c", 15, 2)],
        [("c", 17, 0)], [("a", 15, 1)]]
    assert sweep._groups(jobs, together=False) == [[job] for job in jobs]


def test_jobs_take_the_layers_of_the_profile_given(llama):
    for profile in ("smoke", "cpu"):
        args = argparse.Namespace(profile=profile, tasks=["antonym"], layers="profile", seed_tasks=["sst2"], seeds=2)
        jobs = sweep._jobs(args, llama)
        layers = ltv_layers(llama.n_layers, "antonym", get_profile(profile))
        assert jobs == [("antonym", (l,), 0) for l in layers] + [("sst2", (llama.middle_layer,), s) for s in range(2)]


def test_a_plus_joins_layers_into_one_ltv(llama):
    assert sweep.layer_sets("15,0+4+8,2") == [(0, 4, 8), (2,), (15,)]
    args = argparse.Namespace(profile="smoke", tasks=["rte"], layers="0+2,1", seed_tasks=[], seeds=1)
    assert sweep._jobs(args, llama) == [("rte", (0, 2), 0), ("rte", (1,), 0)]
