"""bench/sweep.py: with --seeds-together, consecutive seeds of one (task, layer) form one group, nothing else does."""

from __future__ import annotations

from tests.bench_scripts import load_bench

sweep = load_bench("sweep")


def test_groups_join_consecutive_seeds_of_one_task_and_layer_only():
    jobs = [("a", 0, 0), ("a", 15, 0), ("b", 15, 1), ("b", 15, 2), ("c", 15, 0), ("c", 15, 1), ("c", 15, 2),
            ("c", 17, 0), ("a", 15, 1)]
    assert sweep._groups(jobs, together=True) == [
        [("a", 0, 0)], [("a", 15, 0)], [("b", 15, 1), ("b", 15, 2)], [("c", 15, 0), ("c", 15, 1), ("c", 15, 2)],
        [("c", 17, 0)], [("a", 15, 1)]]
    assert sweep._groups(jobs, together=False) == [[job] for job in jobs]
