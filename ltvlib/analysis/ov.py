"""OV circuits of attention heads, and the OV and MLP reconstructions of a task vector.

**OV circuit of a head.** Query head ``h`` of layer ``l`` reads the values of its KV group
``g = h // (n_heads / n_kv_heads)`` (grouped-query attention) and writes through its column slice of
``o_proj``::

    OV_{l,h} = W_O[:, h*hd:(h+1)*hd] @ W_V[g*hd:(g+1)*hd, :] @ diag(gamma_l)      (d_model, d_model)

with ``hd`` the config's ``head_dim`` (256 for Gemma 3, not ``d_model / n_heads``) and ``gamma_l`` the gain of
the block's pre-attention RMSNorm (``weight``, or ``1 + weight`` for Gemma). Biases (none in Llama or Gemma 3)
are left out: they do not depend on the input.

**How the norm's scaling is treated.** RMSNorm maps ``x`` to ``gamma * x / rms(x)``. The gain is a fixed
diagonal matrix and is folded into ``W_V`` above. The division by ``rms(x)`` depends on the whole residual
stream the vector is added to, not on the vector, so it cannot be read from the weights; to first order a
vector ``theta`` added to a stream ``x`` enters the values as ``gamma * theta / rms(x)``. The matrices of
:func:`ov_matrix` stop before that factor (weights only). :func:`ov_reconstruction` takes it from
measurements (:func:`measure_norm_scales`): the mean over queries of ``1 / rms`` of the stream entering each
block's attention norm at the last position, with the vector injected, so that each term has the size it
has in the real forward pass; with ``scales=None`` it uses the bare weights, as the paper's formula reads.
Gemma 3 also normalises the attention output (the site table's ``attn_output_norm``) before adding it to the
stream; its gain is folded in and, with scales, the measured ``1 / rms`` of the attention output too. A head's
term is then ``g * OV_{l,h} theta / rms(attention output)``, the same definition of a head's write as
:func:`ltvlib.heads.head_writes` (each head's term of the norm's numerator, divided by the norm's factor at
the actual attention output), so the terms of all heads sum to what the attention block adds.

**Reconstructions of a vector theta injected at layer l** (all ``(d_model,)``, each meant to be injected
*in place of* theta: same site, the residual stream entering block ``l``; same position, the last prompt
token; added):

- :func:`ov_reconstruction`: ``theta_OV = sum over layers l' >= l and heads h of w_{l',h} OV_{l',h} theta``
  (block ``l`` itself counts: its attention reads theta). ``w = 1`` is the paper's sum; ``w_{l',h}`` = the
  attention of the last position to itself (:func:`ltvlib.analysis.key_heads.attention_stats`, ``final``) is the
  attention-weighted variant: the share of theta's value that head actually copies at the last position.
- :func:`mlp_response`, the control: the MLPs' first-order response ``sum over l' >= l of J_{l'} theta``,
  where ``J_{l'}`` is the Jacobian of block ``l'``'s MLP branch (its norm, the MLP and, for Gemma, the post-MLP
  norm) at the stream entering that branch at the last position, averaged over queries. Both are direct-path,
  first-order contributions of theta (through attention values, or through MLPs), so they can be compared.

**The paper's form and ours.** Only the bare-weight sum (``scales=None``, every head weight 1; ``ov_raw`` in
:func:`ltvlib.study.ov.ov_experiment`, :func:`paper_ov`) is the paper's reconstruction. On SmolLM2 it is about 50x
theta's norm, large enough to swamp the stream, so the claim is also decided with that sum rescaled to ``|theta|``
(``variant="at |θ|"``), always against random vectors sent through the same map. The measured-scale and
attention-weighted variants are ours (:data:`OV_VARIANTS`) and decide nothing.

**Control.** :func:`ov_control` sends random vectors of theta's norm (:func:`ltvlib.analysis.controls.random_like`)
through the same reconstruction (the OV sum or the MLP control, in the paper's form or rescaled to ``|theta|``)
and evaluation, so that "theta_OV recovers X %" stands beside "random
vectors' theta_OV recover Y % [central 95 % of the draws]"; every accuracy carries its ``n`` and Wilson
interval, and classification tasks get the label-restricted accuracy beside the full-vocabulary one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..heads import check_head
from ..hooks import Hook, first_input, hooked
from ..inject import VectorEdit
from ..sites import (
    attn_input_norm,
    attn_output_norm,
    check_layer,
    inverse_rms,
    mlp,
    mlp_input_norm,
    mlp_output_norm,
    norm_gain,
    o_proj,
    v_proj,
)
from ..stats import Proportion
from .controls import summarise_control
from .key_heads import LastTokenRunner, head_accuracy

if TYPE_CHECKING:
    from ..models import LoadedModel


def _value_weight(lm: LoadedModel, layer: int) -> Tensor:
    """``W_V`` of ``layer`` with the pre-attention gain folded in: ``(n_kv_heads * head_dim, d_model)``."""
    w_v = v_proj(lm, layer).weight.detach()
    return w_v * norm_gain(attn_input_norm(lm, layer), lm.table).to(w_v.dtype)[None, :]


def ov_matrix(lm: LoadedModel, layer: int, head: int) -> Tensor:
    """``OV_{l,h} = W_O,h W_V,g diag(gamma)``, ``(d_model, d_model)``, weights only (see the module docstring).

    Maps a vector added to the stream entering block ``layer`` (before its attention norm, without the
    ``1 / rms`` factor) to what head ``head`` writes into the attention output if it attends only to that
    position. Query head ``head`` reads KV group ``head // (n_heads / n_kv_heads)``.
    """
    geo = lm.geometry
    h = check_head(head, geo.n_heads)
    g = h // geo.group_size
    hd = geo.head_dim
    w_v = _value_weight(lm, layer)[g * hd : (g + 1) * hd]  # (hd, d)
    w_o = o_proj(lm, layer).weight.detach()[:, h * hd : (h + 1) * hd]  # (d, hd)
    return w_o @ w_v


def ov_outputs(lm: LoadedModel, layer: int, vector: Tensor) -> Tensor:
    """``OV_{l,h} vector`` for every query head ``h`` of ``layer``, without forming the matrices.

    Args:
        vector: ``(d_model,)`` or ``(batch, d_model)``.

    Returns:
        ``(n_heads, d_model)`` or ``(batch, n_heads, d_model)``.
    """
    geo = lm.geometry
    if vector.shape[-1] != geo.d_model or vector.dim() not in (1, 2):
        raise ValueError(f"vector of shape {tuple(vector.shape)}: expected ({geo.d_model},) or (batch, {geo.d_model})")
    w_v = _value_weight(lm, layer)
    w_o = o_proj(lm, layer).weight.detach()
    v = vector.to(w_v.dtype) @ w_v.T  # (..., n_kv * hd)
    v = v.view(*v.shape[:-1], geo.n_kv_heads, geo.head_dim).repeat_interleave(geo.group_size, dim=-2)
    w_o_heads = w_o.view(geo.d_model, geo.n_heads, geo.head_dim)  # column slice of each query head
    return torch.einsum("...hk,dhk->...hd", v, w_o_heads)


@dataclass(frozen=True)
class NormScales:
    """Measured ``1 / rms`` factors at the last position, mean over queries.

    Attributes:
        attn_in: ``(n_layers,)`` for the stream entering each block's pre-attention norm.
        attn_out: ``(n_layers,)`` for the attention output entering the attention-output norm (Gemma's
            ``post_attention_layernorm``); None for architectures without one.
        n: number of queries.
    """

    attn_in: Tensor
    attn_out: Tensor | None
    n: int


@torch.no_grad()
def measure_norm_scales(lm: LoadedModel, runner: LastTokenRunner, edits: Sequence[VectorEdit] = ()) -> NormScales:
    """Mean ``1 / rms`` of the inputs of every block's attention norm (and Gemma's attention-output norm) at
    the last prompt position, with ``edits`` injected; hooks are removed and checked."""
    n_layers = lm.n_layers
    has_out = lm.table.attn_output_norm is not None
    sums: dict[tuple[str, int], float] = {}

    def make(kind: str, layer: int, module: torch.nn.Module) -> Any:
        def pre_hook(mod: Any, args: tuple, kwargs: dict) -> None:
            x = first_input(args, kwargs)
            sums[kind, layer] = sums.get((kind, layer), 0.0) + float(inverse_rms(x[:, -1], module).sum())

        return pre_hook

    kinds = [("attn_in", attn_input_norm)] + ([("attn_out", attn_output_norm)] if has_out else [])
    hooks = []
    for layer in range(n_layers):
        for kind, find in kinds:
            module = find(lm, layer)
            assert module is not None  # attn_out is listed only where the architecture has that norm
            hooks.append(Hook(module, "pre", make(kind, layer, module), f"{kind} {layer}"))
    with hooked(hooks, what="norm-scale hooks"):
        for batch in runner.batches:
            runner.forward(batch, edits)
    n = len(runner)

    def collect(kind: str) -> Tensor:
        return torch.tensor([sums[kind, l] / n for l in range(n_layers)], dtype=torch.float32)

    return NormScales(attn_in=collect("attn_in"), attn_out=collect("attn_out") if has_out else None, n=n)


def ov_reconstruction(
    lm: LoadedModel, vector: Tensor, layer: int, *, scales: NormScales | None = None, head_weights: Tensor | None = None,
) -> Tensor:
    """``theta_OV``: the sum over blocks ``layer..L-1`` and their heads of ``w_{l',h} OV_{l',h} theta``.

    Args:
        vector: ``(d_model,)``, the vector injected at the input of block ``layer`` (last position, added).
        layer: its injection layer.
        scales: measured ``1 / rms`` factors (see the module docstring); None uses the bare weights.
        head_weights: ``(n_layers, n_heads)`` weight of each head (e.g. its attention from the last position
            to itself); None weights every head by 1, the paper's sum.

    Returns:
        ``(d_model,)``, to be injected in place of ``vector``: block input of ``layer``, last position, added.
    """
    geo = lm.geometry
    start = check_layer(layer, geo.n_layers)
    if vector.shape != (geo.d_model,):
        raise ValueError(f"vector of shape {tuple(vector.shape)}: expected ({geo.d_model},)")
    if head_weights is not None and tuple(head_weights.shape) != (geo.n_layers, geo.n_heads):
        raise ValueError(f"head_weights of shape {tuple(head_weights.shape)}: expected ({geo.n_layers}, {geo.n_heads})")
    total = torch.zeros(geo.d_model, dtype=torch.float64, device=vector.device)
    for l in range(start, geo.n_layers):
        per_head = ov_outputs(lm, l, vector).double()  # (n_heads, d)
        w = head_weights[l].to(per_head) if head_weights is not None else torch.ones(geo.n_heads).to(per_head)
        out = (w[:, None] * per_head).sum(0)
        if scales is not None:
            out = out * float(scales.attn_in[l])
        out_norm = attn_output_norm(lm, l)
        if out_norm is not None:
            out = out * norm_gain(out_norm, lm.table).double()
            if scales is not None:
                assert scales.attn_out is not None
                out = out * float(scales.attn_out[l])
        total += out
    return total.to(vector.dtype)


@dataclass(frozen=True)
class MLPStates:
    """The stream entering each MLP branch of blocks ``layer..L-1`` (its pre-MLP norm's input) at the last
    position, one row per query: ``states[l]`` is ``(n_queries, d_model)``. The MLP control's Jacobians are taken
    there (:func:`mlp_map`)."""

    layer: int
    states: dict[int, Tensor]


def mlp_states(lm: LoadedModel, runner: LastTokenRunner, layer: int, edits: Sequence[VectorEdit] = ()) -> MLPStates:
    """:class:`MLPStates` of ``runner``'s queries with ``edits`` injected (one forward pass over the queries)."""
    geo = lm.geometry
    start = check_layer(layer, geo.n_layers)
    states: dict[int, list[Tensor]] = {l: [] for l in range(start, geo.n_layers)}
    hooks = []
    for l, store in states.items():
        def pre_hook(mod: Any, args: tuple, kwargs: dict, store: list = store) -> None:
            store.append(first_input(args, kwargs)[:, -1].detach())

        hooks.append(Hook(mlp_input_norm(lm, l), "pre", pre_hook, f"layer {l}"))
    with hooked(hooks, what="MLP-input hooks"), torch.no_grad():
        for batch in runner.batches:
            runner.forward(batch, edits)
    return MLPStates(start, {l: torch.cat(chunks) for l, chunks in states.items()})


def mlp_map(lm: LoadedModel, states: MLPStates, vector: Tensor) -> Tensor:
    """``sum over l' >= states.layer of mean_q J_{l'}(x_q) vector``: the first-order response of the later MLP
    branches (norm, MLP and, for Gemma, the post-MLP norm) to ``vector``, by forward-mode autodiff at ``states``.
    Linear in ``vector``. ``(d_model,)``, to be injected in place of ``vector`` (block input of ``states.layer``,
    last position, added)."""
    geo = lm.geometry
    if vector.shape != (geo.d_model,):
        raise ValueError(f"vector of shape {tuple(vector.shape)}: expected ({geo.d_model},)")
    total = torch.zeros(geo.d_model, dtype=torch.float64, device=vector.device)
    for l, x in states.states.items():
        norm_in, mlp_l, norm_out = mlp_input_norm(lm, l), mlp(lm, l), mlp_output_norm(lm, l)

        def branch(x: Tensor, norm_in: Any = norm_in, mlp_l: Any = mlp_l, norm_out: Any = norm_out) -> Tensor:
            y = mlp_l(norm_in(x))
            return norm_out(y) if norm_out is not None else y

        # torch types jvp's result as a 2- or 3-tuple; without has_aux it is (output, jvp)
        _, jv = torch.func.jvp(branch, (x,), (vector.to(x.dtype).expand_as(x).contiguous(),))  # type: ignore[misc]
        total += jv.double().mean(0).to(total.device)
    return total.to(vector.dtype)


def mlp_response(lm: LoadedModel, runner: LastTokenRunner, vector: Tensor, layer: int,
                 edits: Sequence[VectorEdit] = ()) -> Tensor:
    """The MLP control: ``sum over l' >= layer of mean_q J_{l'}(x_q) vector`` (see the module docstring).

    ``x_q`` is the stream entering block ``l'``'s MLP branch (its pre-MLP norm) at the last position of query
    ``q``, recorded with ``edits`` injected (:func:`mlp_states`); the Jacobians are applied by :func:`mlp_map`.

    Returns:
        ``(d_model,)``, to be injected in place of ``vector`` (block input of ``layer``, last position, added).
    """
    return mlp_map(lm, mlp_states(lm, runner, layer, edits), vector)


# --------------------------------------------------------------------------------------------------------
# Which reconstruction is the paper's, and the random-vector control
# --------------------------------------------------------------------------------------------------------

#: What each vector of :func:`ltvlib.study.ov.ov_experiment` is. Only ``ov_raw``, the bare-weight sum
#: ``sum_{l' >= l, h} W_O,h W_V,h theta`` (RMSNorm gains folded into the weights, as the paper's notation leaves
#: open), is the paper's reconstruction; the others are ours and must not decide a verdict on the paper's claim.
OV_VARIANTS: dict[str, str] = {
    "ltv": "the LTV itself",
    "ov_raw": "paper",
    "ov": "measured norm scales (ours)",
    "ov_weighted": "attention-weighted, measured norm scales (ours)",
    "ov_normed": "rescaled to |theta| (ours)",
    "mlp": "MLP-path control (the paper's comparison, our first-order form)",
}

#: The forms :func:`ov_control` compares a vector's reconstruction in: ``"paper"``, the map as the paper writes it
#: (the bare-weight OV sum is about 50x the vector's norm on SmolLM2), and ``"at |θ|"``, the same reconstruction
#: rescaled to the norm of the vector it reconstructs, so that a reconstruction is compared with the vector it
#: replaces at equal size rather than saturating the stream.
CONTROL_VARIANTS = ("paper", "at |θ|")

#: The maps :func:`ov_control` can send a vector through: the OV sum (:func:`ov_reconstruction`, bare weights) or
#: the MLP control (:func:`mlp_map`, first order at recorded states).
CONTROL_PATHS = ("ov", "mlp")


def _check_variant(variant: str) -> None:
    if variant not in CONTROL_VARIANTS:
        raise ValueError(f"unknown OV variant {variant!r}; allowed: {', '.join(CONTROL_VARIANTS)}")


def at_norm(out: Tensor, vector: Tensor) -> Tensor:
    """``out`` rescaled to ``vector``'s L2 norm (its direction kept)."""
    return out * (vector.double().norm() / out.double().norm().clamp_min(1e-30)).to(out.dtype)


def paper_ov(lm: LoadedModel, vector: Tensor, layer: int, *, variant: str = "paper") -> Tensor:
    """``theta_OV`` of ``vector`` in the paper's form (bare weights, every head weight 1), or with
    ``variant="at |θ|"`` the same direction at ``vector``'s norm. ``(d_model,)``, to be injected in
    place of ``vector`` (block input of ``layer``, last position, added)."""
    _check_variant(variant)
    out = ov_reconstruction(lm, vector, layer)
    return at_norm(out, vector) if variant == "at |θ|" else out


def reconstruct(lm: LoadedModel, vector: Tensor, layer: int, *, path: str = "ov", variant: str = "paper",
                states: MLPStates | None = None) -> Tensor:
    """``vector`` sent through ``path`` (:data:`CONTROL_PATHS`: ``"ov"``, :func:`paper_ov`; ``"mlp"``,
    :func:`mlp_map` at ``states``, which must start at ``layer``) in ``variant`` (:data:`CONTROL_VARIANTS`).
    ``(d_model,)``, to be injected in place of ``vector`` (block input of ``layer``, last position, added)."""
    _check_variant(variant)
    if path == "ov":
        return paper_ov(lm, vector, layer, variant=variant)
    if path != "mlp":
        raise ValueError(f"unknown reconstruction path {path!r}; allowed: {', '.join(CONTROL_PATHS)}")
    if states is None or states.layer != layer:
        raise ValueError(f"the MLP path needs mlp_states(...) recorded from layer {layer}, got "
                         f"{None if states is None else states.layer}")
    out = mlp_map(lm, states, vector)
    return at_norm(out, vector) if variant == "at |θ|" else out


def proportion_record(correct: Sequence[bool]) -> dict[str, Any]:
    """``{"successes", "n", "value", "low", "high", "correct"}`` of per-query correctness, with the Wilson 95 %
    interval (:class:`ltvlib.stats.Proportion`) and the per-query 0/1 list (for paired bootstraps)."""
    flags = [int(bool(c)) for c in correct]
    p = Proportion(sum(flags), len(flags))
    lo, hi = p.interval
    return {"successes": p.successes, "n": p.n, "value": p.value, "low": lo, "high": hi, "correct": flags}


def injected_accuracy(lm: LoadedModel, runner: LastTokenRunner, vector: Tensor, layer: int) -> dict[str, Any]:
    """Accuracy of ``runner``'s queries with ``vector`` added at the input of block ``layer``, last position.

    Returns:
        ``{"accuracy": proportion, "label_accuracy": proportion or None}`` (:func:`proportion_record`): the
        first-token argmax over the whole vocabulary, and over the label words' first tokens (classification
        tasks only).
    """
    res = head_accuracy(lm, runner, [VectorEdit(layer, -1, vector.to(lm.device, lm.dtype))])
    label = res["label_correct"]
    return {"accuracy": proportion_record(res["correct"]),
            "label_accuracy": proportion_record(label) if label is not None else None}


def ov_control(
    lm: LoadedModel, runner: LastTokenRunner, theta: Tensor, layer: int, draws: Tensor, *, variant: str = "paper",
    path: str = "ov", states: MLPStates | None = None,
) -> dict[str, Any]:
    """The LTV's reconstruction and random vectors' reconstructions through the same map and evaluation.

    Args:
        runner: the test queries.
        theta: ``(d_model,)``, the LTV injected at the input of block ``layer`` (last position, added).
        draws: ``(n_draws, d_model)`` control vectors, e.g. :func:`ltvlib.analysis.controls.random_like` of ``theta``.
        variant: ``"paper"`` (the map as written) or ``"at |θ|"`` (each reconstruction rescaled to the norm of
            the vector it reconstructs; the draws have theta's norm, so all are compared at ``|theta|``).
        path: ``"ov"`` (the OV sum) or ``"mlp"`` (the MLP control at ``states``; see :func:`reconstruct`).

    Returns:
        ``variant``, ``path``, ``layer``, ``norm`` (the LTV's reconstruction's norm over theta's), ``ltv`` (:func:`injected_accuracy` of the LTV's ``theta_OV``), ``draws`` (one
        such record per control vector, in order), and ``summary``: for ``accuracy`` and, for classification
        tasks, ``label_accuracy``, a :class:`ltvlib.analysis.controls.ControlSummary` dict of the LTV's value against
        the draws' values (one-sided, LTV greater).
    """
    if draws.dim() != 2 or draws.shape[1] != lm.d_model or draws.shape[0] < 1:
        raise ValueError(f"draws of shape {tuple(draws.shape)}: expected (n_draws >= 1, {lm.d_model})")
    def through(v: Tensor) -> Tensor:
        return reconstruct(lm, v, layer, path=path, variant=variant, states=states)

    own_vector = through(theta)
    own = injected_accuracy(lm, runner, own_vector, layer)
    rows = [injected_accuracy(lm, runner, through(d), layer) for d in draws]
    summary = {}
    for key in ("accuracy", "label_accuracy"):
        if own[key] is not None:
            summary[key] = summarise_control(own[key]["value"], [r[key]["value"] for r in rows]).to_dict()
    ratio = float(own_vector.double().norm() / theta.double().norm().clamp_min(1e-30))
    return {"variant": variant, "path": path, "layer": layer, "norm": ratio, "ltv": own, "draws": rows,
            "summary": summary}
