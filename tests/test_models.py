"""Model registry and site tables: loud failures, geometry from the config."""

from __future__ import annotations

import pytest

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
