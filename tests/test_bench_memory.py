"""bench/memory.py: a chapter-sized unit's stages on a tiny model, and the peak set against the cached tensors."""

from __future__ import annotations

from tests.bench_scripts import load_bench

memory = load_bench("memory")


def test_stages_report_memory_and_cached_tensors(llama, tmp_path, monkeypatch):
    from ltvlib.study.plans import get_profile, run_sizes

    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    rows = list(memory.stages(llama, "antonym", run_sizes(get_profile("smoke")), layer=1, shots=2))
    assert [r["stage"].split(" ")[0] for r in rows] == ["model", "LTV", "evaluated", "evaluated"]
    params = sum(p.numel() * p.element_size() for p in llama.model.parameters())
    for r in rows:
        assert r["model"] >= params and r["peak"] >= r["rss"] > 0
    assert rows[-1]["test_sets"] > 0  # the evaluations memoised their test sets
    assert memory.ratio(rows) == max(r["peak"] for r in rows) / max(r["model"] + r["store"] + r["test_sets"] for r in rows)
    assert "peak RSS / cached tensors" in memory.table(rows)
