"""Loading a local model prints no "Loading weights" progress bar (it would land in the chapters' stderr)."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers.utils import logging as hf_logging

from ltvlib.models import load_model
from tests.models_fixtures import tiny_llama


@pytest.fixture
def tiny_folder(tmp_path: Path) -> Path:
    lm = tiny_llama()
    lm.model.save_pretrained(tmp_path)
    lm.tokenizer.save_pretrained(tmp_path)
    return tmp_path


def test_loading_a_local_model_prints_no_progress_bar(tiny_folder: Path, capsys: pytest.CaptureFixture) -> None:
    from transformers import AutoModelForCausalLM

    hf_logging.enable_progress_bar()
    # control: transformers itself draws the bar here, so the check below can see one
    AutoModelForCausalLM.from_pretrained(tiny_folder)
    assert "Loading weights" in capsys.readouterr().err
    lm = load_model(str(tiny_folder), device="cpu")
    assert lm.n_layers == 3
    assert "Loading weights" not in capsys.readouterr().err
    assert hf_logging.is_progress_bar_enabled(), "the caller's progress-bar setting must be restored"
