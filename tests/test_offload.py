"""Models larger than one device: a model dispatched by accelerate (part of its blocks on CPU, part offloaded to
disk and read back at each forward) gives the plain model's logits, its edits land where they do on the plain
model, and it trains the same LTV. On this CPU machine every device is the CPU: what is checked is that the
hooks, edits and trained vectors survive accelerate's hooks and offloaded (``meta``) weights."""

from __future__ import annotations

import copy

import pytest
import torch
from arch_fixtures import tiny_qwen2
from models_fixtures import tiny_gemma3, tiny_llama

from ltvlib.inject import VectorEdit, inject
from ltvlib.ltv import PAPER_RECIPE, train_ltv, with_config
from ltvlib.models import dispatch, execution_device, load_model
from ltvlib.tasks import load_splits

BUILDERS = {"llama": tiny_llama, "gemma3": tiny_gemma3, "qwen2": tiny_qwen2}


def _offload_map(lm) -> dict[str, str]:
    """Embedding, first block and head on CPU, the later blocks on disk."""
    base = lm.table.layers.rsplit(".", 1)[0]  # e.g. "model"
    names = [n for n, _ in lm.model.named_children()]
    inner = dict(lm.model.named_modules())[base]
    entries = {f"{base}.{n}": "cpu" for n, _ in inner.named_children() if f"{base}.{n}" != lm.table.layers}
    entries.update({f"{lm.table.layers}.{i}": ("cpu" if i == 0 else "disk") for i in range(lm.n_layers)})
    entries.update({n: "cpu" for n in names if n != base})
    return entries


def _prompt(lm):
    enc = lm.tokenizer(["Q: hot\nA: cold\nQ: big\nA:", "Q: up\nA:"], return_tensors="pt", padding=True,
                       padding_side="left")
    return enc["input_ids"], enc["attention_mask"]


@pytest.mark.parametrize("arch", sorted(BUILDERS))
def test_offloaded_logits_and_edits_match_the_plain_model(arch, tmp_path):
    plain = BUILDERS[arch]()
    off = dispatch(BUILDERS[arch](), _offload_map(plain), offload_dir=tmp_path)
    metas = [n for n, p in off.model.named_parameters() if p.device.type == "meta"]
    assert metas, "nothing was offloaded to disk"
    assert off.device == torch.device("cpu") and off.layer_device(2) == torch.device("cpu")
    ids, mask = _prompt(plain)
    with torch.no_grad():
        want = plain.model(input_ids=ids, attention_mask=mask).logits
        got = off.model(input_ids=ids, attention_mask=mask).logits
        torch.testing.assert_close(got, want)
        vec = torch.randn(plain.d_model, dtype=torch.float64)  # another dtype: cast to the block's
        for lm, out in ((plain, "want"), (off, "got")):
            with inject(lm, [VectorEdit(2, -1, vec * 0.5)], attention_mask=mask):
                logits = lm.model(input_ids=ids, attention_mask=mask).logits
            if out == "want":
                edited_want = logits
            else:
                torch.testing.assert_close(logits, edited_want)
    assert not torch.allclose(edited_want, want)


def test_offloaded_model_trains_the_same_ltv(tmp_path):
    plain = tiny_llama()
    off = dispatch(tiny_llama(), _offload_map(plain), offload_dir=tmp_path)
    splits = load_splits("antonym", n_train=48, n_val=16)
    config = with_config(PAPER_RECIPE, epochs=2, samples_per_epoch=16, patience=5, lr=5e-2)
    a = train_ltv(plain, "antonym", layers=[1, 2], recipe=config, splits=splits, progress=False)
    b = train_ltv(off, "antonym", layers=[1, 2], recipe=config, splits=splits, progress=False)
    assert a.training.steps == b.training.steps > 0
    torch.testing.assert_close(b.vectors, a.vectors, rtol=1e-4, atol=1e-6)


def test_load_model_device_map_from_a_folder(tmp_path):
    plain = tiny_llama()
    folder = tmp_path / "tiny"
    plain.model.save_pretrained(folder)
    plain.tokenizer.save_pretrained(folder)
    off = load_model(str(folder), device_map=_offload_map(plain), offload_dir=tmp_path / "offload",
                     dtype=torch.float32)
    assert any(p.device.type == "meta" for p in off.model.parameters())
    ids, mask = _prompt(plain)
    with torch.no_grad():
        torch.testing.assert_close(off.model(input_ids=ids, attention_mask=mask).logits,
                                   plain.model(input_ids=ids, attention_mask=mask).logits)


def test_execution_device_of_plain_modules():
    lm = tiny_llama()
    assert execution_device(lm.model) == torch.device("cpu")
    assert execution_device(torch.nn.Module()) == torch.device("cpu")
    with pytest.raises(ValueError, match="offload_dir"):
        dispatch(copy.deepcopy(lm), {"": "disk"})


@pytest.mark.realmodel
def test_smollm2_offloaded_matches(tmp_path):
    plain = load_model("smollm2-135m", device="cpu")
    mapping = {"model.embed_tokens": "cpu", "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
    mapping.update({f"model.layers.{i}": ("cpu" if i < 15 else "disk") for i in range(plain.n_layers)})
    off = load_model("smollm2-135m", device_map=mapping, offload_dir=tmp_path, dtype=torch.float32)
    assert any(p.device.type == "meta" for p in off.model.parameters())
    ids, mask = _prompt(plain)
    with torch.no_grad():
        torch.testing.assert_close(off.model(input_ids=ids, attention_mask=mask).logits,
                                   plain.model(input_ids=ids, attention_mask=mask).logits)
    splits = load_splits("antonym", n_train=48, n_val=16)
    config = with_config(PAPER_RECIPE, epochs=1, samples_per_epoch=8, patience=5)
    a = train_ltv(plain, "antonym", layers=[20], recipe=config, splits=splits, progress=False)
    b = train_ltv(off, "antonym", layers=[20], recipe=config, splits=splits, progress=False)
    torch.testing.assert_close(b.vectors, a.vectors, rtol=1e-4, atol=1e-6)


def test_device_map_device_dispatches_the_model_with_the_budget_from_the_environment(monkeypatch):
    """``device="map"`` (what ``python -m ltvlib.book build --device map`` gives every chapter) is
    ``device_map="auto"`` under ``$LTV_MAX_MEMORY``; the dispatched model's logits are the plain model's."""
    from ltvlib.models import parse_max_memory

    monkeypatch.setenv("LTV_MAX_MEMORY", "cpu=4GiB")
    mapped = load_model("random:tiny-llama@3", device="map")
    plain = load_model("random:tiny-llama@3", device="cpu")
    assert getattr(mapped.model, "hf_device_map", None) is not None
    assert getattr(plain.model, "hf_device_map", None) is None
    ids = mapped.tokenizer(["Q: hot\nA:"], return_tensors="pt").input_ids
    with torch.no_grad():
        torch.testing.assert_close(mapped.model(input_ids=ids).logits, plain.model(input_ids=ids).logits)
    assert parse_max_memory("0=70GiB, 1=70GiB,cpu=200GiB") == {0: "70GiB", 1: "70GiB", "cpu": "200GiB"}
    for bad in ("70GiB", "gpu0=70GiB", "0="):
        with pytest.raises(ValueError, match="bad max_memory entry"):
            parse_max_memory(bad)
