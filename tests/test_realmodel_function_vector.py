"""The Function Vector on the real Gemma-3-270M (marker ``realmodel``): it has the size of what its heads write
into the residual stream. Gemma normalises the attention output (``post_attention_layernorm``, gain
``1 + weight``) before adding it; a vector built from ``W_O`` alone was 300 times too small on Antonym."""

from __future__ import annotations

import pytest
import torch

from ltvlib.baselines.function_vector import FunctionVectorConfig, clean_prompts, extract_function_vector
from ltvlib.models import load_model
from ltvlib.tasks import get_task, load_splits

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def real_gemma():
    return load_model("gemma3-270m", device="cpu")


def _measured_writes(lm, prompts, heads):
    """What ``heads`` write at the last token, mean over ``prompts`` (one unpadded forward each), measured with
    hooks on the model's own modules (paths from transformers' Gemma3ForCausalLM, not from ltvlib.sites):

    - ``share``: ``(1 + w) * W_O[:, slice(h)] z_h / rms(a)``, ``a`` the post-attention norm's recorded input;
    - ``ablation``: ``N(a) - N(a - W_O[:, slice(h)] z_h)`` with the norm module ``N`` itself;
    - ``bare``: ``W_O[:, slice(h)] z_h``, the write without the norm.
    """
    hd = lm.geometry.head_dim
    layers = sorted({l for l, _ in heads})
    sums = {k: torch.zeros(lm.d_model, dtype=torch.float64) for k in ("share", "ablation", "bare")}
    for row in prompts.full_rows():
        seen: dict = {}
        handles = []
        for l in layers:
            block = lm.model.model.layers[l]
            handles.append(block.self_attn.o_proj.register_forward_pre_hook(
                lambda m, a, l=l, seen=seen: seen.__setitem__(("z", l), a[0][0, -1].detach())))
            handles.append(block.post_attention_layernorm.register_forward_pre_hook(
                lambda m, a, l=l, seen=seen: seen.__setitem__(("a", l), a[0][0, -1].detach())))
        try:
            with torch.no_grad():
                lm.model(input_ids=torch.tensor([row]), logits_to_keep=1)
        finally:
            for handle in handles:
                handle.remove()
        for l, h in heads:
            block = lm.model.model.layers[l]
            norm = block.post_attention_layernorm
            t = block.self_attn.o_proj.weight[:, h * hd : (h + 1) * hd] @ seen["z", l][h * hd : (h + 1) * hd]
            a = seen["a", l]
            rms = torch.sqrt(a.double().pow(2).mean() + norm.eps)
            sums["share"] += (1 + norm.weight.double()) * t.double() / rms
            with torch.no_grad():
                sums["ablation"] += (norm(a) - norm(a - t)).double()
            sums["bare"] += t.double()
    return {k: v / len(prompts) for k, v in sums.items()}


def test_gemma_function_vector_has_the_size_of_what_its_heads_write(real_gemma):
    lm = real_gemma
    splits = load_splits("antonym")
    fv = extract_function_vector(lm, "antonym", splits.train, FunctionVectorConfig(n_mean=20, n_ie=5))
    # other prompts than the extraction's (seed 1), so the comparison is not the same average twice
    prompts = clean_prompts(lm, get_task("antonym"), splits.train, shots=10, n=20, seed=1)
    written = _measured_writes(lm, prompts, fv.heads)
    fv_norm = float(fv.vector.double().norm())
    ratios = {k: fv_norm / float(v.norm()) for k, v in written.items()}
    cos = float(torch.nn.functional.cosine_similarity(fv.vector.double(), written["share"], dim=0))
    print(f"FV heads {fv.heads}; |FV| = {fv_norm:.3f}; |FV| / |written|: "
          + ", ".join(f"{k} {r:.3g}" for k, r in ratios.items()) + f"; cos(FV, share) = {cos:.3f}")
    assert 0.3 < ratios["share"] < 3 and 0.3 < ratios["ablation"] < 3
    assert cos > 0.8
    # without the norm the heads' terms have another size altogether (the former Function Vector's)
    assert float(written["bare"].norm()) < 0.3 * float(written["share"].norm())
