"""Slow tests on the real embedded models (marker ``realmodel``; CI runs them).

Vectors are trained fresh here (never read from a cache), so the tests check training, not a file on disk. The
one exception is the chapters' smoke execution when ``LTV_TEST_SMOKE_CACHE`` names a folder (see
:func:`smoke_cache`): CI's second run then executes every chapter on the cache its first run filled.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from ltvlib.book.runner import Chapter, execute_chapter
from ltvlib.evaluate import EvalSet, evaluate
from ltvlib.forward import PromptRunner
from ltvlib.inject import VectorEdit
from ltvlib.ltv import train_ltv
from ltvlib.models import load_model
from ltvlib.prompts import encode_prompts
from ltvlib.tasks import load_splits

pytestmark = pytest.mark.realmodel
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def smol():
    return load_model("smollm2-135m", device="cpu")


@pytest.mark.parametrize("task", ["capital", "antonym"])
def test_middle_layer_ltv_beats_zero_shot_by_30_points(smol, task):
    splits = load_splits(task)
    ltv = train_ltv(smol, task, layers=[smol.middle_layer], splits=splits, seed=0, progress=False)
    test = EvalSet(smol, task, splits.test[:200])
    zero = evaluate(test).accuracy
    learned = evaluate(test, ltv.edits()).accuracy
    print(f"{task}: zero-shot {zero:.3f}, LTV {learned:.3f} ({ltv.training.steps} steps, {ltv.training.seconds:.0f} s)")
    assert learned >= zero + 0.30


def test_cached_prefix_equals_full_forward_on_the_real_model(smol):
    splits = load_splits("sst2", n_train=40, n_val=8)
    prompts = encode_prompts(smol.tokenizer, splits.task, splits.test[:6], shared_demos=splits.train[:3])
    theta = torch.randn(smol.d_model, generator=torch.Generator().manual_seed(0)) * 0.5
    full, _ = PromptRunner(smol, prompts, tail=None).run(range(6), [VectorEdit(10, -1, theta)])
    fast, _ = PromptRunner(smol, prompts, tail=1).run(range(6), [VectorEdit(10, -1, theta)])
    atol, rtol = 2e-3, 1e-3  # two exact paths, different float sums (padding, cached keys): rounding only
    torch.testing.assert_close(fast, full, atol=atol, rtol=rtol)
    # The predictions agree wherever the top two logits are further apart than the two paths may differ; a
    # near-tie may flip on another machine without anything being wrong.
    top2 = full.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1]) > 2 * (atol + rtol * top2[..., 0].abs())
    assert clear.sum() >= 4
    assert torch.equal(fast.argmax(-1)[clear], full.argmax(-1)[clear])


def test_gemma3_loads_and_a_vector_changes_its_output():
    gemma = load_model("gemma3-270m", device="cpu")
    assert gemma.geometry.head_dim == 256 and gemma.geometry.n_kv_heads == 1
    splits = load_splits("antonym", n_train=40, n_val=8)
    es = EvalSet(gemma, "antonym", splits.test[:8])
    base = evaluate(es)
    pushed = evaluate(es, [VectorEdit(gemma.middle_layer, -1, torch.randn(gemma.d_model) * 50)])
    assert base.predicted != pushed.predicted


@pytest.fixture(scope="module")
def smoke_cache(tmp_path_factory: pytest.TempPathFactory):
    """The cache the chapters run on: it shares the dequantised models and nothing else with the user's cache.

    By default a fresh, empty folder of this pytest session (every vector and result computed here; shared by
    the xdist workers, so that a chapter reuses the vectors an earlier chapter trained, whichever worker ran
    it). When ``LTV_TEST_SMOKE_CACHE`` names a folder, that folder is used and kept: `.ci/run` creates an empty
    one for its two runs of the suite, so the first run executes every chapter from a cold cache and the second
    on the cache the first filled (the path a reader's rebuild takes; cache keys follow the code and data,
    tests/test_cache.py). Running both from cold would only repeat the first run's 20 minutes.
    """
    load_model("smollm2-135m", device="cpu")  # make sure the model folder exists
    from ltvlib.cache import cache_root

    shared = os.environ.get("LTV_TEST_SMOKE_CACHE")
    if shared:
        fresh = Path(shared)
    elif os.environ.get("PYTEST_XDIST_WORKER"):
        # the workers' base temp folders (popen-gw0, ...) share their parent, which is this session's
        fresh = tmp_path_factory.getbasetemp().parent / "ltv-smoke-cache"
    else:
        fresh = tmp_path_factory.mktemp("ltv-cache")
    fresh.mkdir(parents=True, exist_ok=True)
    models = fresh / "models"
    try:
        models.symlink_to(cache_root() / "models", target_is_directory=True)
    except FileExistsError:  # the other worker, or the first of CI's two runs, made it
        pass
    old = os.environ.get("LTV_CACHE_DIR")
    os.environ["LTV_CACHE_DIR"] = str(fresh)
    yield fresh
    if old is None:
        os.environ.pop("LTV_CACHE_DIR")
    else:
        os.environ["LTV_CACHE_DIR"] = old


# Every chapter source, including chapters written but not yet listed in _toc.yml.
ALL_CHAPTERS = [Chapter(name=p.stem, docname=f"chapters/{p.stem}", root=ROOT) for p in sorted(ROOT.glob("chapters/[0-9]*.py"))]


@pytest.mark.parametrize("chapter", ALL_CHAPTERS, ids=lambda c: c.name)
def test_chapter_executes_under_papermill_smoke(chapter: Chapter, smoke_cache, tmp_path):
    params = {"model": "smollm2-135m", "profile": "smoke", "seed": 0, "device": "cpu"}
    # book_root: the smoke claims go to this test's folder, not to a staging folder a later smoke build would read
    seconds = execute_chapter(
        chapter, params, tmp_path / f"{chapter.name}.ipynb", work_dir=tmp_path / "work", book_root=tmp_path
    )
    print(f"{chapter.name}: {seconds:.0f} s")
    assert (tmp_path / f"{chapter.name}.ipynb").is_file()
