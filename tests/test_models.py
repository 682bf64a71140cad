"""Model registry and site tables: loud failures, geometry from the config."""

from __future__ import annotations

import pytest
import torch

from ltvlib.models import MODEL_REGISTRY, ModelNotAvailableError, load_model
from ltvlib.sites import arch_table, check_layer, decoder_layers, head_geometry


def test_unknown_model_lists_the_choices():
    with pytest.raises(ValueError, match=r"unknown model 'gpt-17'.*smollm2-135m, gemma3-270m"):
        load_model("gpt-17")


def test_unknown_architecture_lists_supported():
    class Config:
        model_type = "mamba"

    with pytest.raises(ValueError, match=r"unsupported architecture model_type='mamba'; supported: .*gemma3_text.*llama"):
        arch_table(Config())


def test_geometry_uses_head_dim_from_config(gemma, llama):
    assert head_geometry(gemma.model.config).head_dim == 32  # not 64 // 4
    assert gemma.geometry.group_size == 4 and llama.geometry.group_size == 2
    assert len(decoder_layers(gemma.model)) == gemma.n_layers == 3


def test_check_layer():
    assert check_layer(-1, 30) == 29
    for bad in (30, -31, 1.5):
        with pytest.raises(ValueError, match="out of range"):
            check_layer(bad, 30)


def test_registry_names():
    assert set(MODEL_REGISTRY) == {"smollm2-135m", "gemma3-270m"}


def test_unavailable_hub_id_names_it_and_what_is_allowed(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # read at import; the test must not wait on a network
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(ModelNotAvailableError) as info:
        load_model("ltv-book-tests/no-such-model", device="cpu")
    message = str(info.value)
    assert "'ltv-book-tests/no-such-model'" in message and "HF_HUB_OFFLINE" in message
    assert "smollm2-135m, gemma3-270m" in message and "local model folder" in message
    assert isinstance(info.value, ValueError) and isinstance(info.value.__cause__, OSError)
    assert not (tmp_path / "cache").exists()


def test_folder_without_a_model_names_it(tmp_path):
    with pytest.raises(ModelNotAvailableError, match=rf"folder '{tmp_path}' is not a Hugging Face model folder"):
        load_model(str(tmp_path), device="cpu")
    assert list(tmp_path.iterdir()) == []


def test_random_model_of_a_named_shape_is_seeded_and_has_that_shape():
    from ltvlib.models import RANDOM_SHAPES

    lm = load_model("random:tiny-llama", device="cpu")
    again = load_model("random:tiny-llama", device="cpu")
    other = load_model("random:tiny-llama@1", device="cpu", dtype="bfloat16")
    assert lm.name == "random:tiny-llama" and other.name == "random:tiny-llama@1"
    assert lm.n_layers == 3 and lm.d_model == 64 and lm.geometry.n_kv_heads == 2
    assert lm.model.config.vocab_size == len(lm.tokenizer)
    assert lm.model.config.ltv_tokenizer in ("smollm2-135m", "byte-level")
    assert other.dtype == torch.bfloat16 and lm.dtype == torch.float32
    for (name, a), b in zip(lm.model.named_parameters(), again.model.parameters()):
        assert torch.equal(a, b), name
    assert not torch.equal(lm.model.lm_head.weight, other.model.lm_head.weight.float())
    ids = lm.tokenizer("Q: hot\nA:", return_tensors="pt").input_ids
    assert lm.model(input_ids=ids).logits.shape == (1, ids.shape[1], len(lm.tokenizer))
    assert set(RANDOM_SHAPES) >= {"llama-3.1-8b", "smollm2-135m", "gemma3-270m", "tiny-llama"}


def test_random_smollm2_shape_matches_the_real_geometry():
    lm = load_model("random:smollm2-135m", device="cpu")
    g = lm.geometry
    assert (g.n_layers, g.d_model, g.n_heads, g.n_kv_heads, g.head_dim) == (30, 576, 9, 3, 64)
    assert lm.middle_layer == 15
    assert 134e6 < sum(p.numel() for p in lm.model.parameters()) < 136e6  # SmolLM2-135M's count (tied embedding)


def test_random_8b_config_is_llama_3_1_8b_and_unknown_shapes_are_named(monkeypatch):
    from transformers import AutoConfig

    from ltvlib.models import RANDOM_SHAPES

    kind, fields = RANDOM_SHAPES["llama-3.1-8b"]
    config = AutoConfig.for_model(kind, vocab_size=128256, **fields)
    blocks = config.num_hidden_layers * (
        config.hidden_size * config.head_dim * (config.num_attention_heads * 2 + config.num_key_value_heads * 2)
        + 3 * config.hidden_size * config.intermediate_size)
    assert 6.9e9 < blocks < 7.0e9  # 8.03e9 with the 2 x 128256 x 4096 embedding and unembedding
    with pytest.raises(ValueError, match="unknown random shape 'gpt-17'; known: llama-3.1-8b"):
        load_model("random:gpt-17", device="cpu")
    with pytest.raises(ValueError, match="bad seed"):
        load_model("random:tiny-llama@x", device="cpu")


def test_byte_tokenizer_round_trips_text():
    from ltvlib.models import byte_tokenizer

    tok = byte_tokenizer()
    text = "Q: café\nA: ok"
    ids = tok(text).input_ids
    assert len(ids) == len(text.encode()) and max(ids) < 256
    assert tok.decode(ids) == text and len(tok) == 259


def test_a_model_folder_published_first_by_another_process_is_kept(tmp_path):
    """Two processes converting the same embedded model at once: the second rename finds the first's folder,
    keeps it and removes its own copy, instead of stopping with "Directory not empty"."""
    from ltvlib.models import _publish_dir

    target, theirs, ours = tmp_path / "smollm2-135m", tmp_path / ".theirs", tmp_path / ".ours"
    for folder, text in [(theirs, "first"), (ours, "second")]:
        folder.mkdir()
        (folder / "config.json").write_text(text)
    _publish_dir(theirs, target)
    _publish_dir(ours, target)
    assert (target / "config.json").read_text() == "first"
    assert not ours.exists() and not theirs.exists()


def test_a_folder_in_the_way_without_a_config_stops_the_publication(tmp_path):
    from ltvlib.models import _publish_dir

    target, ours = tmp_path / "smollm2-135m", tmp_path / ".ours"
    (target / "junk").mkdir(parents=True)
    (target / "junk" / "x").write_text("x")
    ours.mkdir()
    (ours / "config.json").write_text("{}")
    with pytest.raises(OSError):
        _publish_dir(ours, target)
    assert ours.exists()  # the caller removes its folder (and the error says why)
