"""Is a task vector's effect on the last layer linear? Fit the map, split it into rotation and stretch.

The measured quantity (the paper's high-level claim, Section "linear propagation"):

- **Injection.** A vector ``x`` (``(d_model,)``) is *added* to the residual stream *entering* decoder block
  ``l`` (``site="block_input"``) at the **last prompt token** of a zero-shot prompt, the LTV's own site.
- **Shift.** ``shift_q(x) = f_q(h_q^l + x) - f_q(h_q^l)`` for query ``q``, where ``h_q^l`` is the query's
  last-token state entering block ``l`` and ``f_q`` runs blocks ``l..L-1``; the state read is the
  **residual stream entering the final norm** (the output of the last block, before the final RMSNorm and
  the unembedding), last token, shape ``(d_model,)``. Because attention is causal, earlier tokens are
  unaffected, so their keys/values are computed once (:class:`ShiftProbe`) and every shift costs one
  single-token pass from block ``l``.
- **Fit.** ``W`` (``(d, d)``) is fitted to the **query-mean shift** ``s(x) = mean_q shift_q(x)``:
  ``x_i = theta + lambda_i * eps_i`` with ``eps_i ~ N(0, (|theta|^2/d) I_d)`` (so ``E|eps|^2 = |theta|^2``),
  ``lambda_i`` cycling through :attr:`LinearityConfig.lambdas`; there are ``ceil(fit_factor * d) >= d``
  perturbations. Averaging every perturbation over all queries would cost ``n_queries`` forwards each, so
  each perturbation runs on one query ``q_i = i mod n_queries`` and its target is the control-variate
  estimate ``y_i = shift_{q_i}(x_i) - shift_{q_i}(theta) + s(theta)`` (unbiased for ``s(x_i)``; the query's
  own offset at ``theta`` is removed, the query-dependence of the response to ``eps`` remains as noise).
  ``W`` minimises ``sum_i |y_i - W x_i|^2 + r |W|_F^2`` with a relative ridge ``r = ridge * trace(X^T X) / d``
  (``d^2`` unknowns from about ``2 d`` noisy pairs: the ridge trades bias for held-out accuracy).
  Quality on fresh perturbations: ``R^2`` about the mean (the part of the shift that *varies* with the
  perturbation) and the explained fraction ``1 - SSE / sum |y|^2`` (the whole shift).
- **Reconstruction.** ``W theta`` is *added* to the residual stream **entering the final norm** at the last
  token (:func:`add_before_final_norm`), instead of ``theta`` at block ``l``.
- **Polar decomposition.** ``W = U diag(s) V^T``, ``Q = U V^T`` (orthogonal: the rotation), ``S = V diag(s) V^T``
  (symmetric PSD: the stretch), ``W = Q S``. ``Q theta`` is the rotation-only vector, ``S theta`` the
  stretch-only one (``|S theta| = |W theta|``).
- **Diagnostics.** Logit lens (top tokens of ``unembed(final_norm(v))``), task alignment (the norm of
  ``v``'s projection onto the span of the label tokens' *effective* unembeddings ``u_t * g``, with ``g`` the
  final norm's gain, over ``|v|``), logit difference (gold label minus the mean of the other labels, on the
  final-norm input of real queries with ``v`` added), ``cos(theta, Q theta)``.
- **Controls.** :func:`shift_accuracies`: the paper's constant shift ``W theta`` beside its upper bound, each
  query's own shift. :func:`linearity_control`: the same diagnostics for random vectors of ``theta``'s norm
  at the same layer; ``W`` is fitted around each vector from its own perturbations, so each draw costs one
  fit (``n_draws`` sets the cost; ``fit=False`` keeps the fit-free measurements). Chapter-level, cached:
  :func:`ltvlib.study.linearity.cached_linearity_control`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..hooks import Hook, first_input, hooked, with_first_input
from ..inject import record_residual
from ..kv_cache import KVPrefix, compute_prefix, forward_from_layer, forward_tokens
from ..prompts import answer_ids, encode_prompts, pad_left
from ..sites import check_layer, final_norm, norm_gain, unembedding
from ..tasks import Example, Task, get_task
from .configs import LinearityConfig

if TYPE_CHECKING:
    from ..models import LoadedModel

# ---------------------------------------------------------------------------------------------------------
# The final norm: record its input, add a vector to it, read a vector through it (logit lens)


@contextmanager
def record_final_norm_input(lm: LoadedModel) -> Iterator[list[Tensor]]:
    """Capture the residual stream entering the final norm.

    Yields a list that each forward inside the ``with`` appends one ``(batch, seq, d_model)`` tensor to
    (``seq`` = the columns the final norm sees: all of the forward's tokens for a full forward, the kept
    columns for :func:`~ltvlib.kv_cache.forward_from_layer`). The hook is removed on exit and must have fired.
    """
    captured: list[Tensor] = []

    def pre(module: Any, args: tuple, kwargs: dict) -> None:
        captured.append(first_input(args, kwargs).detach())

    with hooked([Hook(final_norm(lm), "pre", pre, "the final norm's input")], what="the recording hook"):
        yield captured


@contextmanager
def add_before_final_norm(lm: LoadedModel, vector: Tensor) -> Iterator[None]:
    """Add ``vector`` to the residual stream entering the final norm, at the last column of each forward.

    Site: the input of the final RMSNorm (``= block_output`` of the last block), the state the shifts of
    this module are measured in. Position: the **last column** of every forward inside the ``with``, which
    is the last prompt token for left-padded next-token evaluations (:func:`~ltvlib.evaluate.evaluate`);
    do not use it with teacher-forced answer tokens. Mode: add.

    Args:
        vector: ``(d_model,)`` (every row) or ``(batch, d_model)``.

    Raises:
        ValueError: wrong vector size, or a forward whose batch does not match a ``(batch, d_model)`` vector.
        HookNotFiredError: (on exit) no forward ran through the final norm.
    """
    if vector.dim() not in (1, 2) or vector.shape[-1] != lm.d_model:
        raise ValueError(f"vector of shape {tuple(vector.shape)}: expected ({lm.d_model},) or (batch, {lm.d_model})")

    def pre(module: Any, args: tuple, kwargs: dict) -> tuple:
        hidden = first_input(args, kwargs)
        if vector.dim() == 2 and vector.shape[0] != hidden.shape[0]:
            raise ValueError(f"vector has {vector.shape[0]} rows but the forward has batch {hidden.shape[0]}")
        hidden = hidden.clone()
        hidden[:, -1] = hidden[:, -1] + vector.to(hidden.dtype)
        return with_first_input(args, kwargs, hidden)

    with hooked([Hook(final_norm(lm), "pre", pre, "the final norm's input")], what="the adding hook"):
        yield


@torch.no_grad()
def lens_logits(lm: LoadedModel, states: Tensor) -> Tensor:
    """Logits of residual-stream vectors read as final-norm inputs: ``unembed(final_norm(states))``.

    ``states`` is ``(..., d_model)``; returns ``(..., vocab)`` in float32, soft-capped like the model's own
    logits when the model caps them (Gemma 2)."""
    param = next(lm.model.parameters())
    normed = final_norm(lm)(states.to(device=param.device, dtype=param.dtype))
    logits = unembedding(lm)(normed).float()
    cap = getattr(lm.model.config, "final_logit_softcapping", None)
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    return logits


def logit_lens(lm: LoadedModel, vector: Tensor, k: int = 10) -> list[str]:
    """The ``k`` top tokens (decoded) of ``vector`` (``(d_model,)``) read through the final norm and unembedding."""
    if vector.dim() != 1 or vector.shape[0] != lm.d_model:
        raise ValueError(f"vector of shape {tuple(vector.shape)}: expected ({lm.d_model},)")
    top = lens_logits(lm, vector).topk(k).indices.tolist()
    return [lm.tokenizer.decode([t]) for t in top]


def label_token_ids(lm: LoadedModel, task: Task | str, examples: Sequence[Example]) -> list[int]:
    """The task's label tokens: first tokens of the label words (classification) or, for generation tasks,
    the distinct first tokens of the gold answers of ``examples`` (in order of first appearance)."""
    task = get_task(task) if isinstance(task, str) else task
    words = task.labels if task.labels else [e.output for e in examples]
    return list(dict.fromkeys(ids[0] for ids in answer_ids(lm.tokenizer, task, words)))


def effective_unembedding(lm: LoadedModel, token_ids: Sequence[int]) -> Tensor:
    """``(len(token_ids), d_model)`` rows ``u_t * g``: what a final-norm input is dotted with to give token
    ``t``'s logit (``g`` = the final norm's elementwise gain), up to the norm's common ``1/rms`` factor."""
    unembed = unembedding(lm).weight.detach()
    gain = norm_gain(final_norm(lm), lm.table)
    return unembed[list(token_ids)].float() * gain.float()


def task_alignment(lm: LoadedModel, vectors: Tensor, token_ids: Sequence[int]) -> Tensor:
    """``|P v| / |v|`` for each row ``v`` of ``vectors`` (``(n, d)`` or ``(d,)``), ``P`` the orthogonal
    projection onto the span of the label tokens' effective unembeddings (:func:`effective_unembedding`).

    A random direction scores about ``sqrt(rank / d)`` (:func:`alignment_baseline`)."""
    basis = _label_basis(lm, token_ids)
    v = vectors.float().to(basis.device)
    proj = v @ basis.T
    return proj.norm(dim=-1) / v.norm(dim=-1).clamp_min(1e-30)


def alignment_baseline(lm: LoadedModel, token_ids: Sequence[int]) -> float:
    """Expected-square-root alignment of a random direction: ``sqrt(rank / d_model)``."""
    return math.sqrt(_label_basis(lm, token_ids).shape[0] / lm.d_model)


def _label_basis(lm: LoadedModel, token_ids: Sequence[int]) -> Tensor:
    if not token_ids:
        raise ValueError("task alignment needs at least one label token")
    rows = effective_unembedding(lm, token_ids)
    _, s, vh = torch.linalg.svd(rows, full_matrices=False)
    rank = int((s > s[0] * 1e-6).sum())
    return vh[:rank]  # (rank, d) orthonormal rows


@torch.no_grad()
def logit_difference(lm: LoadedModel, states: Tensor, gold: Sequence[int], labels: Sequence[int]) -> float:
    """Mean over queries of ``logit(gold) - mean(logits of the other labels)`` from final-norm inputs.

    Args:
        states: ``(n, d_model)`` residual stream entering the final norm (last token), with whatever was added.
        gold: ``n`` gold first-token ids, each among ``labels``.
        labels: label token ids (:func:`label_token_ids`), at least two.
    """
    labels = list(labels)
    if len(labels) < 2:
        raise ValueError(f"the logit difference needs at least two labels, got {len(labels)}")
    missing = sorted(set(gold) - set(labels))
    if missing:
        raise ValueError(f"gold tokens {missing[:5]} are not among the {len(labels)} label tokens")
    logits = lens_logits(lm, states)[:, labels]  # (n, k)
    col = torch.tensor([labels.index(g) for g in gold], device=logits.device)
    g = logits.gather(1, col[:, None])[:, 0]
    others = (logits.sum(1) - g) / (len(labels) - 1)
    return float((g - others).mean())


@torch.no_grad()
def lens_accuracy(lm: LoadedModel, states: Tensor, gold: Sequence[int]) -> float:
    """First-token accuracy (argmax over the whole vocabulary) of final-norm inputs ``(n, d_model)``."""
    pred = lens_logits(lm, states).argmax(-1).cpu()
    return float((pred == torch.tensor(list(gold))).float().mean())


# ---------------------------------------------------------------------------------------------------------
# Shifts over a cached prefix


class ShiftProbe:
    """Final-state shifts of zero-shot queries caused by vectors added at the block input of a layer.

    The prompts' tokens before the last one are run once (:func:`~ltvlib.kv_cache.compute_prefix`), and the
    last token's block-input state at every layer is recorded; :meth:`shifts` then runs single-token
    passes from block ``l`` (:func:`~ltvlib.kv_cache.forward_from_layer`), in batches of mixed queries.

    Args:
        lm: the model.
        task: gives the prompt template (``Q: {x}\\nA:``) and answers.
        queries: the queries (zero-shot prompts; every prompt needs at least two tokens).
        max_batch: rows per forward.
        max_batch_bytes: cap on the gathered prefix keys/values of one batch.

    Attributes:
        states: ``(n, n_layers, d)`` last-token residual stream entering each block, no vector.
        gold: ``n`` gold first-token ids.
    """

    def __init__(
        self, lm: LoadedModel, task: Task | str, queries: Sequence[Example], *, max_batch: int = 256,
        max_batch_bytes: int = 256 * 2**20,
    ) -> None:
        self.lm = lm
        self.task = get_task(task) if isinstance(task, str) else task
        self.queries = list(queries)
        if not self.queries:
            raise ValueError(f"no queries for task {self.task.name!r}")
        self.max_batch = max_batch
        self.max_batch_bytes = max_batch_bytes
        rows = encode_prompts(lm.tokenizer, self.task, self.queries).full_rows()
        short = [i for i, r in enumerate(rows) if len(r) < 2]
        if short:
            raise ValueError(f"queries {short[:5]} tokenise to fewer than two tokens; a prefix needs one")
        ids, mask = pad_left([r[:-1] for r in rows], lm.tokenizer.pad_token_id, lm.device)
        self.prefix: KVPrefix = compute_prefix(lm, ids, mask)
        self.last = torch.tensor([[r[-1]] for r in rows], device=lm.device)
        with torch.no_grad(), record_residual(lm, list(range(lm.n_layers))) as rec:
            forward_tokens(lm, self.last, torch.ones_like(self.last), prefix=self.prefix)
        self.states = torch.stack([rec[l][:, -1] for l in range(lm.n_layers)], dim=1)
        self.gold = [ids[0] for ids in answer_ids(lm.tokenizer, self.task, [e.output for e in self.queries])]
        self._base: dict[int, Tensor] = {}

    def __len__(self) -> int:
        return len(self.queries)

    def _batches(self, query_index: Tensor) -> Iterator[Tensor]:
        per_row = max(1, self.prefix.nbytes // self.prefix.batch)
        size = max(1, min(self.max_batch, self.max_batch_bytes // per_row))
        order = torch.argsort(query_index, stable=True)
        for start in range(0, len(order), size):
            yield order[start : start + size]

    def _prefix_rows(self, query_index: Tensor, layer: int) -> KVPrefix:
        """The prefix of these queries; layers before ``layer`` are never read, so they get cheap views."""
        p = self.prefix
        idx = query_index.to(p.attention_mask.device)
        n = len(idx)

        def gather(t: Tensor, l: int) -> Tensor:
            return t[idx] if l >= layer else t[:1].expand(n, -1, -1, -1)

        return KVPrefix([gather(k, l) for l, k in enumerate(p.keys)], [gather(v, l) for l, v in enumerate(p.values)],
                        p.attention_mask[idx], p.next_position[idx])

    @torch.no_grad()
    def final_states(self, layer: int, vectors: Tensor, query_index: Sequence[int] | Tensor) -> Tensor:
        """Residual stream entering the final norm, last token, with ``vectors[i]`` added at the input of
        block ``layer`` (last token) of query ``query_index[i]``.

        Args:
            layer: injection block (negative counts from the end).
            vectors: ``(m, d_model)``.
            query_index: ``m`` query indices.

        Returns:
            ``(m, d_model)`` float32 on the CPU.
        """
        layer = check_layer(layer, self.lm.n_layers)
        q = torch.as_tensor(query_index, dtype=torch.long).cpu()
        if vectors.dim() != 2 or vectors.shape != (len(q), self.lm.d_model):
            raise ValueError(f"vectors of shape {tuple(vectors.shape)}: expected ({len(q)}, {self.lm.d_model})")
        if len(q) and (int(q.min()) < 0 or int(q.max()) >= len(self)):
            raise ValueError(f"query indices must lie in [0, {len(self) - 1}]")
        out = torch.empty((len(q), self.lm.d_model), dtype=torch.float32)
        for rows in self._batches(q):
            qs = q[rows]
            hidden = self.states[qs.to(self.states.device), layer] + vectors[rows].to(self.states)
            mask = torch.ones((len(rows), 1), dtype=torch.long, device=self.lm.device)
            with record_final_norm_input(self.lm) as cap:
                forward_from_layer(self.lm, hidden[:, None], layer, mask, prefix=self._prefix_rows(qs, layer))
            out[rows] = cap[-1][:, -1].float().cpu()
        return out

    def base(self, layer: int) -> Tensor:
        """``(n, d_model)`` final-norm inputs without a vector, computed by the same path as the shifts (so a
        zero vector gives exactly zero shift to queries run in the same batches, and zero up to float rounding
        in other batch compositions)."""
        layer = check_layer(layer, self.lm.n_layers)
        if layer not in self._base:
            zeros = torch.zeros((len(self), self.lm.d_model))
            self._base[layer] = self.final_states(layer, zeros, range(len(self)))
        return self._base[layer]

    def shifts(self, layer: int, vectors: Tensor, query_index: Sequence[int] | Tensor) -> Tensor:
        """``(m, d_model)`` shifts ``final(h + vectors[i]) - final(h)`` of queries ``query_index[i]``."""
        q = torch.as_tensor(query_index, dtype=torch.long).cpu()
        return self.final_states(layer, vectors, q) - self.base(layer)[q]

    def shift_all(self, layer: int, vector: Tensor) -> Tensor:
        """``(n, d_model)``: the shift of every query by one vector ``(d_model,)``."""
        n = len(self)
        return self.shifts(layer, vector.reshape(1, -1).expand(n, -1).cpu(), range(n))


# ---------------------------------------------------------------------------------------------------------
# The fit, its checks, and the polar decomposition


@dataclass
class LinearFit:
    """A fitted linear map and its quality.

    Attributes:
        layer: injection block.
        W: ``(d, d)`` float32, ``shift(x) ~ W x``.
        r2_heldout: ``1 - SSE / SST`` on held-out pairs (``SST`` about the held-out mean target).
        explained_heldout: ``1 - SSE / sum |y|^2`` on held-out pairs: the fraction of the shift explained.
        r2_train: ``R^2`` on the fitting pairs (optimistic: ``d`` parameters per output from ``fit_factor*d`` pairs).
        n_fit, n_heldout: pair counts.
        mean_shift: ``(d,)`` the query-mean shift of ``theta`` itself.
    """

    layer: int
    W: Tensor
    r2_heldout: float
    explained_heldout: float
    r2_train: float
    n_fit: int
    n_heldout: int
    mean_shift: Tensor


def perturbations(theta: Tensor, n: int, lambdas: Sequence[float], generator: torch.Generator) -> Tensor:
    """``(n, d)``: ``theta + lambda_i * eps_i``, ``eps_i ~ N(0, |theta|^2/d I)``, ``lambda_i = lambdas[i % k]``."""
    d = theta.numel()
    eps = torch.randn((n, d), generator=generator, dtype=torch.float64) * (theta.double().norm() / math.sqrt(d))
    lam = torch.tensor(list(lambdas), dtype=torch.float64)[torch.arange(n) % len(lambdas)]
    return (theta.double().cpu() + lam[:, None] * eps).float()


def r_squared(y: Tensor, pred: Tensor, *, centred: bool = True) -> float:
    """``1 - |y - pred|^2 / |y - mean(y)|^2`` over all rows and coordinates (``centred=False``: ``/ |y|^2``)."""
    y, pred = y.double(), pred.double()
    ref = y - y.mean(0) if centred else y
    return float(1 - (y - pred).pow(2).sum() / ref.pow(2).sum().clamp_min(1e-300))


def solve_ridge(x: Tensor, y: Tensor, ridge: float) -> Tensor:
    """``W`` (``(d_out, d_in)``) minimising ``|y - x W^T|^2 + r |W|^2`` with ``r = ridge * trace(x^T x) / d_in``."""
    x, y = x.double(), y.double()
    gram = x.T @ x
    r = ridge * float(gram.diagonal().sum()) / gram.shape[0]
    return torch.linalg.solve(gram + r * torch.eye(gram.shape[0], dtype=gram.dtype), x.T @ y).T.float()


def fit_linear_map(probe: ShiftProbe, layer: int, theta: Tensor, config: LinearityConfig | None = None) -> LinearFit:
    """Fit ``W`` with ``s(theta + lambda eps) ~ W (theta + lambda eps)``, ``s`` the query-mean shift.

    See the module docstring for the noise law and the control-variate targets. Raises ``ValueError`` for a
    bad layer or a ``theta`` of the wrong size."""
    config = config or LinearityConfig()
    layer = check_layer(layer, probe.lm.n_layers)
    theta = theta.detach().float().cpu().reshape(-1)
    d = probe.lm.d_model
    if theta.numel() != d:
        raise ValueError(f"theta has {theta.numel()} entries, the model's residual stream {d}")
    gen = torch.Generator().manual_seed(config.seed)
    n_fit = max(d, math.ceil(config.fit_factor * d))
    x_fit = perturbations(theta, n_fit, config.lambdas, gen)
    q_fit = torch.arange(n_fit) % len(probe)
    x_ho = perturbations(theta, config.n_heldout, config.lambdas, gen)
    q_ho = (torch.arange(config.n_heldout) + n_fit) % len(probe)
    at_theta = probe.shift_all(layer, theta)  # (n_queries, d)
    offset = at_theta - at_theta.mean(0)
    y_fit = probe.shifts(layer, x_fit, q_fit) - offset[q_fit]
    y_ho = probe.shifts(layer, x_ho, q_ho) - offset[q_ho]
    w = solve_ridge(x_fit, y_fit, config.ridge)
    pred = x_ho @ w.T
    return LinearFit(layer=layer, W=w, r2_heldout=r_squared(y_ho, pred),
                     explained_heldout=r_squared(y_ho, pred, centred=False), r2_train=r_squared(y_fit, x_fit @ w.T),
                     n_fit=n_fit, n_heldout=config.n_heldout, mean_shift=at_theta.mean(0))


def polar(w: Tensor) -> tuple[Tensor, Tensor]:
    """Right polar decomposition ``W = Q S`` from the SVD ``W = U diag(s) V^T``: ``Q = U V^T`` (orthogonal),
    ``S = V diag(s) V^T`` (symmetric positive semi-definite). Computed in float64, returned as float32."""
    if w.dim() != 2 or w.shape[0] != w.shape[1]:
        raise ValueError(f"polar decomposition needs a square matrix, got {tuple(w.shape)}")
    u, s, vh = torch.linalg.svd(w.double())
    q = u @ vh
    sym = vh.T @ torch.diag(s) @ vh
    return q.float(), (0.5 * (sym + sym.T)).float()


def cosine(a: Tensor, b: Tensor) -> float:
    a, b = a.double().reshape(-1), b.double().reshape(-1)
    return float(a @ b / (a.norm() * b.norm()).clamp_min(1e-300))


def homogeneity(
    probe: ShiftProbe, layer: int, theta: Tensor, scales: Sequence[float], *, at_theta: Tensor | None = None
) -> list[dict[str, float]]:
    """Shift of ``a * theta`` against ``a`` on every query of the probe.

    Returns, per scale ``a``: ``coef`` (projection of the mean shift on the mean shift at ``a = 1``, in units
    of it: ``a`` if linear), ``cos`` (cosine of the two mean shifts: ``sign(a)`` if linear) and ``rel_dev``
    (mean over queries of ``|shift_q(a theta) - a shift_q(theta)| / |a shift_q(theta)|``: 0 if linear).
    ``at_theta``: the ``(n, d)`` shifts of ``theta`` if already computed."""
    theta = theta.detach().float().cpu()
    one = probe.shift_all(layer, theta) if at_theta is None else at_theta
    ref = one.mean(0).double()
    out = []
    for a in scales:
        s = one if a == 1 else probe.shift_all(layer, a * theta)
        m = s.mean(0).double()
        lin = a * one
        dev = ((s - lin).norm(dim=-1) / lin.norm(dim=-1).clamp_min(1e-30)).mean()
        out.append({"scale": float(a), "coef": float(m @ ref / (ref @ ref)), "cos": cosine(m, ref),
                    "rel_dev": float(dev)})
    return out


def additivity(
    probe: ShiftProbe, layer: int, theta1: Tensor, theta2: Tensor, *, at_theta1: Tensor | None = None
) -> dict[str, float]:
    """Shift of ``theta1 + theta2`` against the sum of their shifts, on every query of the probe.

    Returns ``rel_err`` (mean over queries of ``|s(t1 + t2) - s(t1) - s(t2)| / |s(t1) + s(t2)|``) and ``cos``
    (cosine of the mean joint shift with the mean summed shift). ``at_theta1``: shifts of ``theta1`` if known."""
    t1, t2 = theta1.detach().float().cpu(), theta2.detach().float().cpu()
    s1 = probe.shift_all(layer, t1) if at_theta1 is None else at_theta1
    s2, s12 = probe.shift_all(layer, t2), probe.shift_all(layer, t1 + t2)
    total = s1 + s2
    err = ((s12 - total).norm(dim=-1) / total.norm(dim=-1).clamp_min(1e-30)).mean()
    return {"rel_err": float(err), "cos": cosine(s12.mean(0), total.mean(0))}


# ---------------------------------------------------------------------------------------------------------
# Upper bound beside the constant shift, and the random-vector control


@torch.no_grad()
def lens_proportions(lm: LoadedModel, states: Tensor, gold: Sequence[int], labels: Sequence[int] | None = None) -> dict[str, Any]:
    """Accuracy of final-norm inputs ``(n, d_model)`` with its ``n`` and Wilson interval.

    Returns:
        ``{"accuracy": record, "label_accuracy": record or None}`` (records as
        :func:`ltvlib.analysis.ov.proportion_record`): the first-token argmax over the whole vocabulary, and, when
        ``labels`` (the label words' first tokens) are given, over those tokens only.
    """
    from .ov import proportion_record

    logits = lens_logits(lm, states).cpu()
    g = torch.tensor(list(gold))
    full = (logits.argmax(-1) == g).tolist()
    label = None
    if labels is not None:
        ids = torch.tensor(list(labels))
        label = proportion_record((ids[logits[:, ids].argmax(-1)] == g).tolist())
    return {"accuracy": proportion_record(full), "label_accuracy": label}


def shift_accuracies(
    probe: ShiftProbe, layer: int, theta: Tensor, constant: Tensor, labels: Sequence[int] | None = None,
) -> dict[str, Any]:
    """The paper's constant shift against its upper bound, each query's own shift, on the probe's queries.

    ``constant`` (``(d_model,)``, e.g. ``W theta``) is added to every query's final-norm input (last token);
    ``own_shift`` adds each query's own measured shift ``shift_q(theta)`` (what the LTV at block ``layer``
    really does there), the most any single added vector per query could reproduce; ``mean_shift`` adds the
    query-mean of those shifts (the best constant ``W theta`` could aim at). Returns
    :func:`lens_proportions` records for ``zero_shot``, ``constant``, ``mean_shift`` and ``own_shift``.
    """
    base = probe.base(layer)
    own = probe.shift_all(layer, theta.detach().float().cpu())
    states = {"zero_shot": base, "constant": base + constant.float().cpu(), "mean_shift": base + own.mean(0),
              "own_shift": base + own}
    return {name: lens_proportions(probe.lm, st, probe.gold, labels) for name, st in states.items()}


def vector_diagnostics(
    probe: ShiftProbe, layer: int, vector: Tensor, token_ids: Sequence[int], config: LinearityConfig | None = None,
    *, fit: bool = True,
) -> dict[str, float]:
    """The chapter's per-vector measurements, for the LTV or a control vector (``(d_model,)``).

    Always (``n_queries`` single-token forwards): ``cos_mean_shift`` (``cos(v, s(v))``, ``s`` the query-mean
    shift), ``alignment`` (task alignment of ``v``) and ``alignment_mean_shift``. With ``fit`` (``W`` is fitted
    around each vector from its own perturbations ``v + lambda eps``: ``ceil(fit_factor * d) + n_heldout``
    forwards and a ``d x d`` solve), also ``cos_theta_Qtheta``, ``alignment_Qtheta``, ``alignment_Wtheta``,
    ``r2_heldout`` and ``norm_ratio`` (``|S v| / |v|``)."""
    return _diagnostics(probe, layer, vector, token_ids, config, fit)[0]


def _diagnostics(
    probe: ShiftProbe, layer: int, vector: Tensor, token_ids: Sequence[int], config: LinearityConfig | None, fit: bool,
) -> tuple[dict[str, float], Tensor | None]:
    """:func:`vector_diagnostics` and the fitted ``W`` (None without ``fit``)."""
    v = vector.detach().float().cpu().reshape(-1)
    mean_shift = probe.shift_all(layer, v).mean(0)
    out = {"cos_mean_shift": cosine(v, mean_shift), "alignment": float(task_alignment(probe.lm, v, token_ids)),
           "alignment_mean_shift": float(task_alignment(probe.lm, mean_shift, token_ids))}
    if fit:
        lf = fit_linear_map(probe, layer, v, config)
        q, sym = polar(lf.W)
        qv, wv = q @ v, lf.W @ v
        out |= {"cos_theta_Qtheta": cosine(v, qv), "alignment_Qtheta": float(task_alignment(probe.lm, qv, token_ids)),
                "alignment_Wtheta": float(task_alignment(probe.lm, wv, token_ids)), "r2_heldout": lf.r2_heldout,
                "norm_ratio": float((sym @ v).norm() / v.norm())}
        return out, lf.W
    return out, None


def linearity_control(
    probe: ShiftProbe, layer: int, theta: Tensor, token_ids: Sequence[int], draws: Tensor,
    config: LinearityConfig | None = None, *, fit: bool = True, ltv_values: dict[str, float] | None = None,
) -> dict[str, Any]:
    """:func:`vector_diagnostics` of the LTV ``theta`` and of every control vector in ``draws``.

    ``ltv_values``: the LTV's own :func:`vector_diagnostics` if already measured (with the same ``fit``).

    ``draws`` (``(n_draws, d_model)``) are e.g. :func:`ltvlib.analysis.controls.random_like` of ``theta``: vectors of
    its norm injected at the same layer. Each fit costs as much as the LTV's own, so the control's cost is
    ``n_draws`` times the fit (``fit=False`` keeps only the fit-free measurements).

    Returns:
        ``ltv`` (the LTV's values), ``draws`` (one dict per draw, in order) and ``summary``: per measurement a
        :class:`ltvlib.analysis.controls.ControlSummary` dict (LTV against the draws; mean and central 95 % of the
        draws, one-sided p-value for the LTV being greater).
    """
    from .controls import summarise_control

    if draws.dim() != 2 or draws.shape[1] != probe.lm.d_model or draws.shape[0] < 1:
        raise ValueError(f"draws of shape {tuple(draws.shape)}: expected (n_draws >= 1, {probe.lm.d_model})")
    own = vector_diagnostics(probe, layer, theta, token_ids, config, fit=fit) if ltv_values is None else ltv_values
    rows = [vector_diagnostics(probe, layer, d, token_ids, config, fit=fit) for d in draws]
    summary = {k: summarise_control(own[k], [r[k] for r in rows]).to_dict() for k in own}
    return {"ltv": own, "draws": rows, "summary": summary, "fit": fit, "n_draws": int(draws.shape[0])}
