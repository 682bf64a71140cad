"""Every kind of task vector (learned, function, vanilla in both forms) passes the same checks of the
:class:`~ltvlib.task_vector.TaskVector` protocol, on the tiny Llama and Gemma 3 models (grouped-query
attention): it is a ``TaskVector``; its edits sit where its kind says (site, positions, layers, shapes) and
scale; ``apply`` changes the logits and always removes its hooks (on exit and on an exception);
``save`` then :func:`~ltvlib.vector_files.load_task_vector` gives back the same edits and the saved file says
where they go; scale 0 leaves an added vector without effect. The vanilla and function vectors are
extracted for a task read from a file (:meth:`~ltvlib.tasks.Task.from_jsonl`), which the vanilla vector's
evaluation must find without the registry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from ltvlib.baselines.function_vector import FunctionVector, FunctionVectorConfig, extract_function_vector
from ltvlib.baselines.vanilla_tv import (
    Form,
    VanillaTaskVector,
    VanillaTVConfig,
    extract_vanilla_tv,
    select_layer,
    zero_shot_evalset,
)
from ltvlib.evaluate import evaluate
from ltvlib.ltv import FAST_RECIPE, LearnedTaskVector, train_ltv, with_config
from ltvlib.models import LoadedModel
from ltvlib.prompts import encode_prompts, pad_left
from ltvlib.task_vector import KINDS, TaskVector
from ltvlib.tasks import Task, load_splits
from ltvlib.vector_files import load_task_vector, vector_kind

KIND_NAMES = ("ltv", "fv", "vanilla_replace", "vanilla_difference")
MODELS = ("llama", "gemma")

# site, mode and positions each kind's edits must have
EXPECTED = {
    "ltv": ("block_input", "add", (-1,)),
    "fv": ("block_output", "add", (-1,)),
    "vanilla_replace": ("block_output", "replace", (-1,)),
    "vanilla_difference": ("block_output", "add", (-1,)),
}


@pytest.fixture(scope="module")
def file_task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    """Antonym's rows written to a JSONL file and read back as a task outside the registry."""
    splits = load_splits("antonym", n_train=60, n_val=20, n_test=20)
    rows = [*splits.train, *splits.validation, *splits.test]
    path = tmp_path_factory.mktemp("task") / "my_antonyms.jsonl"
    path.write_text("".join(json.dumps({"input": e.input, "output": e.output}) + "\n" for e in rows))
    return Task.from_jsonl(path)


_VECTORS: dict[tuple[str, str], TaskVector] = {}


def _make(kind: str, lm: LoadedModel, task: Task) -> TaskVector:
    splits = load_splits(task, n_train=40, n_val=16)
    pool = splits.train
    if kind == "ltv":
        recipe = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=8, retries_without_progress=0)
        return train_ltv(lm, "antonym", layers=[1], recipe=recipe, splits=load_splits("antonym", n_train=24, n_val=8),
                         progress=False)
    if kind == "fv":
        return extract_function_vector(lm, task, pool, FunctionVectorConfig(shots=2, n_mean=4, n_ie=2, k=2, layer=1))
    form: Form = "replace" if kind == "vanilla_replace" else "difference"
    tv = extract_vanilla_tv(lm, task, pool, VanillaTVConfig(shots=2, n_dummy=1, n_contexts=2, n_dev=8, form=form))
    return select_layer(lm, tv, splits.validation)


@pytest.fixture(params=KIND_NAMES)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=MODELS)
def lm(request: pytest.FixtureRequest) -> LoadedModel:
    return request.getfixturevalue(request.param)


@pytest.fixture
def vector(kind: str, lm: LoadedModel, file_task: Task) -> TaskVector:
    key = (kind, lm.name)
    if key not in _VECTORS:
        _VECTORS[key] = _make(kind, lm, file_task)
    return _VECTORS[key]


def _batch(lm: LoadedModel, task: Task) -> tuple[torch.Tensor, torch.Tensor]:
    """Three zero-shot prompts of the task, left-padded."""
    queries = load_splits(task, n_train=4, n_val=4).test[:3]
    prompts = encode_prompts(lm.tokenizer, task, queries)
    return pad_left(prompts.full_rows(), lm.tokenizer.pad_token_id, lm.device)


@torch.no_grad()
def _logits(lm: LoadedModel, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    ids, mask = batch
    return lm.model(input_ids=ids, attention_mask=mask).logits


def _hook_count(lm: LoadedModel) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in lm.model.modules())


def _placement(edits: list) -> list[tuple[int, int, str, str]]:
    return [(e.layer, e.position, e.site, e.mode) for e in edits]


def test_is_a_task_vector(vector: TaskVector, kind: str) -> None:
    assert isinstance(vector, TaskVector)
    assert isinstance(vector.model, str) and vector.model
    assert vector.task in ("antonym", "my_antonyms")


def test_edits_sit_where_the_kind_says_and_scale(vector: TaskVector, kind: str, lm: LoadedModel) -> None:
    site, mode, positions = EXPECTED[kind]
    edits = vector.edits()
    assert edits, "a vector with no edits"
    assert {e.site for e in edits} == {site} and {e.mode for e in edits} == {mode}
    assert tuple(dict.fromkeys(e.position for e in edits)) == positions
    for e in edits:
        assert e.vector.shape == (lm.d_model,) and 0 <= e.layer < lm.n_layers
    layer = lm.n_layers - 1
    moved = vector.edits(layer=layer)
    assert [e.layer for e in moved] == [layer] * len(moved)
    assert [(e.position, e.site, e.mode) for e in moved] == [(e.position, e.site, e.mode) for e in edits]
    doubled = vector.edits(scale=2.0)
    assert _placement(doubled) == _placement(edits)
    for a, b in zip(doubled, edits):
        torch.testing.assert_close(a.vector, 2.0 * b.vector)


def test_apply_changes_logits_and_removes_its_hooks(vector: TaskVector, lm: LoadedModel, file_task: Task) -> None:
    batch = _batch(lm, file_task)
    hooks = _hook_count(lm)
    plain = _logits(lm, batch)
    with vector.apply(lm):
        assert _hook_count(lm) > hooks
        edited = _logits(lm, batch)
    assert _hook_count(lm) == hooks
    assert not torch.allclose(edited, plain)
    # only the last position's prediction and later ones can move (every kind edits position -1)
    torch.testing.assert_close(edited[:, :-1], plain[:, :-1])
    torch.testing.assert_close(_logits(lm, batch), plain)
    with pytest.raises(RuntimeError, match="boom"), vector.apply(lm, scale=0.5):
        _logits(lm, batch)
        raise RuntimeError("boom")
    assert _hook_count(lm) == hooks
    torch.testing.assert_close(_logits(lm, batch), plain)


def test_apply_wraps_generate(vector: TaskVector, lm: LoadedModel, file_task: Task) -> None:
    """``apply`` edits generate's prefill (it raises if its hooks never fired) and cleans up after it."""
    ids, mask = _batch(lm, file_task)
    hooks = _hook_count(lm)
    model: Any = lm.model  # generate is untyped
    with torch.no_grad(), vector.apply(lm):
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=2, do_sample=False,
                                pad_token_id=lm.tokenizer.pad_token_id)
    assert out.shape == (ids.shape[0], ids.shape[1] + 2) and _hook_count(lm) == hooks


def test_scale_zero_leaves_an_added_vector_without_effect(vector: TaskVector, kind: str, lm: LoadedModel,
                                                          file_task: Task) -> None:
    if EXPECTED[kind][1] != "add":
        pytest.skip("a replaced state is written, so scale 0 writes zeros: no identity to check")
    batch = _batch(lm, file_task)
    plain = _logits(lm, batch)
    with vector.apply(lm, scale=0.0):
        assert torch.equal(_logits(lm, batch), plain)


def test_save_load_round_trip(vector: TaskVector, kind: str, tmp_path: Path) -> None:
    path = vector.save(tmp_path / f"{kind}.safetensors")
    assert vector_kind(path) in KINDS
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    back = load_task_vector(path)
    assert type(back) is type(vector) and isinstance(back, TaskVector)
    assert back.model == vector.model and back.task == vector.task
    before, after = vector.edits(), back.edits()
    assert _placement(after) == _placement(before)
    for a, b in zip(after, before):
        assert torch.equal(a.vector.cpu(), b.vector.cpu())
    site, mode, positions = EXPECTED[kind]
    assert meta["site"] == site and meta["mode"] == mode
    assert tuple(json.loads(meta["positions"])) == positions
    assert json.loads(meta["layers"]) == list(dict.fromkeys(e.layer for e in before))


def test_load_task_vector_rejects_other_files(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    other = tmp_path / "other.safetensors"
    save_file({"x": torch.zeros(2)}, str(other), metadata={"something": "else"})
    with pytest.raises(ValueError, match="not a saved task vector"):
        load_task_vector(other)
    with pytest.raises(FileNotFoundError):
        load_task_vector(tmp_path / "missing.safetensors")


@pytest.mark.parametrize("model", MODELS)
def test_vanilla_tv_of_a_file_task_evaluates_without_the_registry(model: str, file_task: Task, tmp_path: Path,
                                                                  request: pytest.FixtureRequest) -> None:
    lm = request.getfixturevalue(model)
    key = ("vanilla_difference", lm.name)
    if key not in _VECTORS:
        _VECTORS[key] = _make("vanilla_difference", lm, file_task)
    tv = _VECTORS[key]
    assert isinstance(tv, VanillaTaskVector) and tv.task == "my_antonyms" and tv.layer is not None
    test = load_splits(file_task, n_train=4, n_val=4).test[:6]
    direct = evaluate(zero_shot_evalset(lm, tv, test), tv.edits())
    back = load_task_vector(tv.save(tmp_path / "tv.safetensors"))
    assert isinstance(back, VanillaTaskVector) and back.source_task == file_task
    again = evaluate(zero_shot_evalset(lm, back, test), back.edits())
    assert again.correct == direct.correct


def test_static_conformance() -> None:
    """mypy checks these assignments: the classes conform to the protocol structurally."""
    kinds: list[type[TaskVector]] = [LearnedTaskVector, FunctionVector, VanillaTaskVector]
    assert all(callable(k.load) for k in kinds)
