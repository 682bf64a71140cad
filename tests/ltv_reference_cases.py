"""The runs whose vectors and curves tests/data/ltv_reference.pt holds: made by the trainer before it stepped
several runs as rows of one batch; the one-run path must still reproduce them bit for bit.

Regenerate (only when the trainer's numbers are meant to change): ``python -m tests.ltv_reference_cases``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ltvlib.ltv import FAST_RECIPE, PAPER_RECIPE, with_config
from ltvlib.tasks import load_splits

REFERENCE = Path(__file__).parent / "data" / "ltv_reference.pt"

# name: (fixture, task, train_ltv keyword arguments); retries off, so the "learned" rule cannot change a run
CASES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "fast-one-vector": ("llama", "antonym", {
        "layers": [1], "seed": 0,
        "recipe": with_config(FAST_RECIPE, epochs=3, samples_per_epoch=24, batch_size=8, lr=3.0, patience=5,
                              retries_without_progress=0)}),
    "fast-grid-gemma": ("gemma", "antonym", {
        "layers": [0, 2], "positions": (-2, -1), "seed": 5,
        "recipe": with_config(FAST_RECIPE, epochs=3, samples_per_epoch=24, batch_size=8, lr=3.0, patience=5,
                              retries_without_progress=0)}),
    "fast-early-stop-sst2": ("llama", "sst2", {
        "layers": [1], "seed": 2,
        "recipe": with_config(FAST_RECIPE, epochs=4, samples_per_epoch=16, batch_size=8, lr=0.3, patience=1,
                              patience_after_gain=False, retries_without_progress=0)}),
    "fast-k-shot": ("llama", "antonym", {
        "layers": [1, 2], "shots": 2, "seed": 1,
        "recipe": with_config(FAST_RECIPE, epochs=2, samples_per_epoch=16, batch_size=4, lr=3.0,
                              retries_without_progress=0)}),
    "paper": ("llama", "antonym", {
        "layers": [1], "seed": 3, "recipe": with_config(PAPER_RECIPE, epochs=2, samples_per_epoch=6)}),
}


def splits(task: str):
    return load_splits(task, n_train=48, n_val=16)


def outcome(ltv: Any) -> dict[str, Any]:
    """What the reference pins: the kept vectors, the whole curve and the run's numbers."""
    return {"vectors": ltv.vectors.clone(), "curve": list(ltv.training.curve), "steps": ltv.training.steps,
            "steps_to_best": ltv.training.steps_to_best, "best_val_accuracy": ltv.training.best_val_accuracy,
            "best_val_score": ltv.training.best_val_score, "start_val_score": ltv.training.start_val_score,
            "effective_lr": tuple(ltv.training.effective_lr), "effective_init": tuple(ltv.training.effective_init)}


def main() -> None:
    import torch

    from ltvlib.ltv import train_ltv
    from tests.models_fixtures import tiny_gemma3, tiny_llama

    models = {"llama": tiny_llama(), "gemma": tiny_gemma3()}
    out = {name: outcome(train_ltv(models[fixture], task, splits=splits(task), progress=False, **kwargs))
           for name, (fixture, task, kwargs) in CASES.items()}
    REFERENCE.parent.mkdir(exist_ok=True)
    torch.save(out, REFERENCE)
    print(f"wrote {REFERENCE}")


if __name__ == "__main__":
    main()
