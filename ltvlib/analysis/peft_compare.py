"""The LTV against ``peft`` adapters (LoRA, prefix tuning, prompt tuning) on the same data, loss and batches.

Every method is trained the way :func:`ltvlib.ltv.train_ltv` trains an LTV, so that only the adapter
differs:

- **prompts**: zero-shot prompts of the task (``ltvlib.prompts.encode_prompts``), left-padded; the gold
  answer's tokens follow the prompt (teacher forcing), right-padded: ``[pad][prompt][answer]``.
- **loss**: :func:`ltvlib.ltv.answer_loss`, the mean negative log-likelihood over the answer's tokens,
  averaged over the batch.
- **batches**: :func:`batch_schedule` draws exactly the query indices ``train_ltv`` draws with the same seed
  (tested), epoch by epoch.
- **optimiser**: AdamW with the schedule's weight decay, the learning rate decayed linearly to 0 over the
  maximum number of steps.
- **sample budget and early stopping** (a fair race): every method gets the same training samples (the
  schedule's ``epochs x samples_per_epoch``) and one shared :class:`StoppingRule`: validate every
  ``val_every`` samples (and at the end of the budget), compare the rule's score (balanced accuracy for
  classification tasks, accuracy otherwise, as ``train_ltv``), stop after ``patience`` validations without a
  better score (counted only after a first gain when ``after_gain``), keep the best parameters. By default
  the rule is the schedule's own (:meth:`StoppingRule.from_config`: validation once per epoch), i.e. exactly
  the rule ``train_ltv`` applies to the LTV. Each validation records samples seen, training and wall seconds
  (time-to-accuracy curves: :func:`time_to_accuracy`).
- **metric**: first-token accuracy over the full vocabulary at the last prompt position (as
  :func:`ltvlib.evaluate.evaluate`).

Where each method acts (``L`` layers, ``d`` model width, ``H``/``H_kv`` query/key-value heads of size
``h``):

- ``ltv``: one vector ``(d,)`` added to the residual stream entering block ``l`` (default ``L // 2``) at the
  last prompt position (``ltvlib.inject``): ``d`` parameters.
- ``prompt_tuning`` (``peft.PromptTuningConfig``, ``SAMPLE_VOCAB`` init: embeddings of random vocabulary
  tokens): ``n`` virtual token embeddings ``(n, d)`` put before the prompt: ``n * d`` parameters.
- ``prefix_tuning`` (``peft.PrefixTuningConfig``, no reparametrisation): ``n`` virtual keys and values in
  every layer, ``(n, 2 * L * H_kv * h)``: ``n * 2 * L * H_kv * h`` parameters (11,520 = 20d for ``n = 1`` on
  SmolLM2-135M: 30 layers x 2 x 192, d = 576; ``peft`` trains a key and a value per layer, so even one
  virtual token is not the paper's ``d``), initialised to the model's own keys and values of random tokens.
- ``lora`` (``peft.LoraConfig``): ``W x + (alpha / r) B A x`` on the chosen projections of the chosen layers,
  ``A (r, d_in)``, ``B (d_out, r)``: ``r * (d_in + d_out)`` parameters per projection; rank 1 on ``o_proj``
  (``d_in = H * h``, ``d_out = d``) of one layer is ``2d`` when ``H * h = d``.

Positions: every token gets the position it would have without padding (``positions_from_mask``); for
prompt tuning the virtual tokens come first (positions ``0..n-1``) and the prompt continues after them,
for prefix tuning ``peft`` shifts the prompt's positions by ``n`` itself. ``peft``'s own forward ignores
``position_ids`` for prompt tuning, so that method runs ``peft``'s prompt encoder (``get_prompt``) and the
base model directly with the positions above; the other two run through ``PeftModel.forward``. (peft 0.21
hands the prefix to transformers 5 as ``past_key_values``, which transformers renames to ``cache`` with a
deprecation warning; a test checks that the prefix reaches the attention.)

Costs measured per method: median seconds per training step over the same batches, steps and training
seconds (validation excluded) to the best validation accuracy, inference latency per test example, and
peak memory in training and inference: on CUDA ``torch.cuda.max_memory_allocated`` in this process; on CPU
the peak resident set size (``VmHWM``) of a fresh subprocess that loads the model, runs one inference batch
and then two training steps, with the peak reset (``/proc/self/clear_refs``) between the two phases, so
that no method inherits another's freed heap.
"""

from __future__ import annotations

import abc
import copy
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor

from ..forward import PromptRunner
from ..inject import VectorEdit
from ..ltv import FAST_RECIPE, TrainConfig, absolute_recipe, answer_loss
from ..ltv_record import LTVRecord
from ..prompts import EncodedPrompts, answer_ids, encode_prompts, pad_left, pad_right, positions_from_mask
from ..sites import check_layer
from ..tasks import Task, TaskSplits, load_splits
from .configs import CompareSizes, StoppingRule

if TYPE_CHECKING:
    from ..models import LoadedModel

KINDS = ("ltv", "prompt_tuning", "prefix_tuning", "lora")
BUDGETS = ("equal", "usual", "default")
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass(frozen=True)
class Method:
    """One adapter configuration.

    Attributes:
        name: a short unique label (``"lora-r1-o"``).
        kind: ``"ltv"``, ``"prompt_tuning"``, ``"prefix_tuning"`` or ``"lora"``.
        lr: peak AdamW learning rate.
        virtual_tokens: prompt/prefix tuning: number of virtual tokens.
        rank: LoRA rank ``r``; alpha: LoRA ``alpha`` (scale ``alpha / r``), default ``2 r``.
        targets: LoRA: projections adapted (names in :data:`PROJECTIONS`).
        layers: LoRA: adapted layers (None = every layer); LTV: its layer (None = the middle layer); prefix
            tuning: the layers whose virtual keys and values train (None = every layer; the other layers keep the
            prefix's starting keys and values, those the model computes for random tokens).
        budget: ``"equal"`` (the paper's parameter budget), ``"usual"`` (a customary setting) or ``"default"``
            (the library's own default configuration, :func:`default_methods`).
    """

    name: str
    kind: str
    lr: float
    virtual_tokens: int = 1
    rank: int = 1
    alpha: float | None = None
    targets: tuple[str, ...] = ("o_proj",)
    layers: tuple[int, ...] | None = None
    budget: str = "equal"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown method kind {self.kind!r}; allowed: {', '.join(KINDS)}")
        bad = [t for t in self.targets if t not in PROJECTIONS]
        if bad:
            raise ValueError(f"unknown LoRA target(s) {bad}; allowed: {', '.join(PROJECTIONS)}")
        if self.virtual_tokens < 1 or self.rank < 1:
            raise ValueError(f"virtual_tokens and rank must be >= 1, got {self.virtual_tokens} and {self.rank}")
        if self.budget not in BUDGETS:
            raise ValueError(f"budget must be one of {', '.join(BUDGETS)}, got {self.budget!r}")


# Learning rates (none tuned in this comparison): the LTV's is the fast recipe's (chosen on Antonym for
# batch-32 training). The adapters' are the high end of their customary ranges, because the schedules here
# are short (tens to a hundred steps): peft's prompt/prefix-tuning examples use 1e-2 to 3e-2, LoRA
# fine-tunes 1e-4 to 1e-3 over thousands of steps; at 1e-3, rank-1 LoRA on SmolLM2 barely moved its loss in
# chapter 03's 16-step cpu race (8.43 -> 8.39 on Antonym), so LoRA gets 1e-2.
LTV_LR = absolute_recipe(FAST_RECIPE).lr  # the fast recipe's steps are stream-relative; this trainer's are absolute
PROMPT_LR = 3e-2
PREFIX_LR = 3e-2
LORA_LR = 1e-2


def equal_budget_methods(lm: LoadedModel, *, ltv_lr: float = LTV_LR) -> list[Method]:
    """The paper's budgets: LTV (d), 1 virtual token of prompt tuning (d), of prefix tuning trained at the middle
    layer only (2 H_kv h, at most d: 0.67d on SmolLM2) and in every layer (2 L H_kv h), rank-1 LoRA on ``o_proj``
    of the middle layer (``H h + d``, = 2d on SmolLM2).
    ``ltv_lr``: the LTV's learning rate (default the fast recipe's, absolute; the race passes its schedule's)."""
    mid = lm.middle_layer
    return [
        Method("ltv", "ltv", ltv_lr, layers=(mid,)),
        Method("prompt-1", "prompt_tuning", PROMPT_LR, virtual_tokens=1),
        Method(f"prefix-1-L{mid}", "prefix_tuning", PREFIX_LR, virtual_tokens=1, layers=(mid,)),
        Method("prefix-1", "prefix_tuning", PREFIX_LR, virtual_tokens=1),
        Method(f"lora-r1-o{mid}", "lora", LORA_LR, rank=1, targets=("o_proj",), layers=(mid,)),
    ]


def usual_methods(lm: LoadedModel, *, prompt_tuning: bool = True) -> list[Method]:
    """Customary settings: LoRA rank 8 (alpha 16) on q/k/v/o of every layer, prefix tuning with 10 virtual
    tokens, prompt tuning with 10 virtual tokens (optional: it lengthens every prompt by 10 tokens)."""
    methods = [
        Method("lora-r8-qkvo", "lora", LORA_LR, rank=8, targets=PROJECTIONS, layers=None, budget="usual"),
        Method("prefix-10", "prefix_tuning", PREFIX_LR, virtual_tokens=10, budget="usual"),
    ]
    if prompt_tuning:
        methods.append(Method("prompt-10", "prompt_tuning", PROMPT_LR, virtual_tokens=10, budget="usual"))
    return methods


def default_methods(lm: LoadedModel, *, prompt_tuning: bool = True) -> list[Method]:
    """Each adapter's commonly used default, to sit beside its equal-budget version: ``peft``'s
    ``LoraConfig`` defaults (rank 8, ``lora_alpha`` 8, dropout off here) on ``q_proj`` and ``v_proj`` of every
    layer (``peft``'s default targets for Llama-style models), and 20 virtual tokens of prefix and prompt
    tuning (the value of ``peft``'s prompt-based-method guides)."""
    methods = [
        Method("lora-r8-qv", "lora", LORA_LR, rank=8, alpha=8, targets=("q_proj", "v_proj"), budget="default"),
        Method("prefix-20", "prefix_tuning", PREFIX_LR, virtual_tokens=20, budget="default"),
    ]
    if prompt_tuning:
        methods.append(Method("prompt-20", "prompt_tuning", PROMPT_LR, virtual_tokens=20, budget="default"))
    return methods


def race_methods(lm: LoadedModel, *, prompt_tuning: bool = True, ltv_lr: float = LTV_LR) -> list[Method]:
    """The fair race's field: every equal-budget method, then each adapter's default setting."""
    return equal_budget_methods(lm, ltv_lr=ltv_lr) + default_methods(lm, prompt_tuning=prompt_tuning)


def parameter_units(lm: LoadedModel, method: Method) -> str:
    """The exact trainable-parameter count in units of ``d`` (``"1d"``, ``"2d"``, ``"20d"``; two decimals when
    not a whole multiple, e.g. rank-1 LoRA on ``o_proj`` of a model whose ``H h`` differs from ``d``)."""
    n, d = parameter_formula(lm, method)[0], lm.d_model
    return f"{n // d}d" if n % d == 0 else f"{n / d:.2f}d"


def projection_shape(lm: LoadedModel, target: str) -> tuple[int, int]:
    """``(d_in, d_out)`` of an attention projection from the model's head geometry."""
    g, d = lm.geometry, lm.d_model
    q, kv = g.n_heads * g.head_dim, g.n_kv_heads * g.head_dim
    shapes = {"q_proj": (d, q), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (q, d)}
    if target not in shapes:
        raise ValueError(f"unknown projection {target!r}; allowed: {', '.join(shapes)}")
    return shapes[target]


def parameter_formula(lm: LoadedModel, method: Method) -> tuple[int, str]:
    """The trainable-parameter count a method should have, and the formula as text.

    ``ltv``: d; ``prompt_tuning``: n d; ``prefix_tuning``: n 2 L H_kv h; ``lora``: sum over adapted layers and
    projections of r (d_in + d_out)."""
    g, d, n_layers = lm.geometry, lm.d_model, lm.n_layers
    if method.kind == "ltv":
        return d, f"d = {d}"
    if method.kind == "prompt_tuning":
        n = method.virtual_tokens
        return n * d, f"n d = {n} x {d}"
    if method.kind == "prefix_tuning":
        n, kv = method.virtual_tokens, g.n_kv_heads * g.head_dim
        if method.layers is not None:
            k = len(method.layers)
            return n * 2 * k * kv, f"n 2 (layers) H_kv h = {n} x 2 x {k} x {g.n_kv_heads} x {g.head_dim}"
        return n * 2 * n_layers * kv, f"n 2 L H_kv h = {n} x 2 x {n_layers} x {g.n_kv_heads} x {g.head_dim}"
    layers = method.layers if method.layers is not None else tuple(range(n_layers))
    per_layer = sum(method.rank * sum(projection_shape(lm, t)) for t in method.targets)
    parts = " + ".join(f"({projection_shape(lm, t)[0]} + {projection_shape(lm, t)[1]})" for t in method.targets)
    return len(layers) * per_layer, f"{len(layers)} layer(s) x r [{parts}] with r = {method.rank}"


# ----------------------------------------------------------------------------------------------- batches


def batch_schedule(n_train: int, config: TrainConfig, seed: int) -> list[list[list[int]]]:
    """The training indices ``train_ltv`` draws for zero-shot prompts with this config and seed.

    Returns:
        ``epochs x batches x batch_size`` indices into the training split: ``ceil(samples_per_epoch /
        batch_size)`` batches per epoch, the queries popped from shuffled passes over the split (no repeat
        within a pass, any number of samples from a small split). Like ``train_ltv``, each batch first draws
        its demonstration block (a single one for zero-shot prompts), which advances the generator.
        ``tests/test_peft_compare.py`` checks this against ``train_ltv``.
    """
    from ..ltv import BatchSampler  # the very sampler train_ltv uses, so the two cannot drift apart

    sampler = BatchSampler([list(range(n_train))], random.Random(seed))
    steps = math.ceil(config.samples_per_epoch / config.batch_size)
    epochs = []
    for _ in range(config.epochs):
        sizes = [min(config.batch_size, config.samples_per_epoch - b * config.batch_size) for b in range(steps)]
        epochs.append([sampler.batch(size)[1] for size in sizes])
    return epochs


class EarlyStopping:
    """:class:`StoppingRule`'s bookkeeping, the same arithmetic as ``train_ltv``'s loop."""

    def __init__(self, rule: StoppingRule, start_score: float) -> None:
        self.rule, self.best, self.stale, self.gained = rule, start_score, 0, False

    def observe(self, score: float) -> bool:
        """Record a validation score; True when it is the new best (keep these parameters)."""
        if score > self.best:
            self.best, self.stale, self.gained = score, 0, True
            return True
        if self.gained or not self.rule.after_gain:
            self.stale += 1
        return False

    @property
    def stop(self) -> bool:
        return self.stale >= self.rule.patience


def time_to_accuracy(curve: Sequence[dict[str, Any]], target: float) -> dict[str, float] | None:
    """The first validation point whose accuracy reaches ``target``: ``{"samples", "wall_seconds",
    "train_seconds", "val_accuracy"}``, or None when no point does."""
    for c in curve:
        if c["val_accuracy"] >= target:
            return {k: c[k] for k in ("samples", "wall_seconds", "train_seconds", "val_accuracy")}
    return None


def _teacher_forced(
    pad_id: int, rows: Sequence[Sequence[int]], answers: Sequence[Sequence[int]] | None, device: torch.device
) -> tuple[Tensor, Tensor, Tensor, int]:
    """``[pad][prompt][answer[:-1]][pad]`` ids and mask, the answer-token validity mask ``(batch, n)`` and
    ``n``, the number of final columns whose logits predict the answer tokens (1 without answers)."""
    ids, mask = pad_left(rows, pad_id, device)
    if answers is None:
        return ids, mask, torch.ones((len(rows), 1), dtype=torch.bool, device=device), 1
    n = max(len(a) for a in answers)
    cont, cont_mask = pad_right([a[:-1] for a in answers], pad_id, n - 1, device)
    valid = pad_right(answers, 0, n)[1].bool().to(device)
    return torch.cat([ids, cont], 1), torch.cat([mask, cont_mask], 1), valid, n


# ------------------------------------------------------------------------------------------------ trainees


class Trainee(abc.ABC):
    """A model with one trainable adapter: ``logits(prompts, index, answers)`` and its parameters.

    ``logits`` returns ``(batch, n, vocab)`` where column ``j`` predicts answer token ``j`` (``n`` = longest
    answer; 1 and the next token when ``answers`` is None), and ``valid (batch, n)``.
    """

    params: list[Tensor]

    @abc.abstractmethod
    def logits(
        self, prompts: EncodedPrompts, index: Sequence[int], answers: Sequence[Sequence[int]] | None
    ) -> tuple[Tensor, Tensor]:
        """Logits at the answer positions with the adapter applied (see the class docstring)."""

    def n_trainable(self) -> int:
        return sum(p.numel() for p in self.params)

    def state(self) -> list[Tensor]:
        return [p.detach().clone() for p in self.params]

    def load(self, state: list[Tensor]) -> None:
        with torch.no_grad():
            for p, s in zip(self.params, state):
                p.copy_(s)

    def close(self) -> None:
        """Release the adapter's model copy."""


class LTVTrainee(Trainee):
    """The LTV through the library's full-forward path (``PromptRunner`` with ``tail=None``): one vector
    ``(d,)`` added to the residual stream entering block ``layer`` at the last prompt position. Initialised
    like ``train_ltv``: ``U(-init_range, init_range)`` from ``torch.Generator().manual_seed(seed)``."""

    def __init__(self, lm: LoadedModel, layer: int, init_range: float, seed: int) -> None:
        self.lm, self.layer = lm, check_layer(layer, lm.n_layers)
        gen = torch.Generator().manual_seed(seed)
        vector = (torch.rand(1, lm.d_model, generator=gen) * 2 - 1) * init_range
        self.vector = vector[0].to(lm.device).requires_grad_(True)
        self.params = [self.vector]
        self._runners: dict[int, PromptRunner] = {}

    def logits(self, prompts, index, answers):
        runner = self._runners.get(id(prompts))
        if runner is None:
            runner = self._runners[id(prompts)] = PromptRunner(self.lm, prompts, tail=None, cache_rows=False)
        return runner.run(list(index), [VectorEdit(self.layer, -1, self.vector)], answers=answers)

    def close(self) -> None:
        self._runners.clear()


class PeftTrainee(Trainee):
    """A ``peft`` adapter on a private copy of the model (the shared model is never modified)."""

    def __init__(self, lm: LoadedModel, method: Method, seed: int, *, copy_model: bool = True) -> None:
        from peft import LoraConfig, PrefixTuningConfig, PromptTuningConfig, PromptTuningInit, TaskType, get_peft_model

        self.lm, self.method = lm, method
        if method.kind == "prompt_tuning":
            # Initialised from the embeddings of random vocabulary tokens, so the virtual tokens start at the
            # scale of real ones (peft's RANDOM init draws N(0, 1), far larger than SmolLM2's embeddings).
            config: PromptTuningConfig | PrefixTuningConfig | LoraConfig = PromptTuningConfig(
                task_type=TaskType.CAUSAL_LM, num_virtual_tokens=method.virtual_tokens,
                prompt_tuning_init=PromptTuningInit.SAMPLE_VOCAB,
            )
        elif method.kind == "prefix_tuning":
            config = PrefixTuningConfig(
                task_type=TaskType.CAUSAL_LM, num_virtual_tokens=method.virtual_tokens, prefix_projection=False
            )
        elif method.kind == "lora":
            layers = list(method.layers) if method.layers is not None else None
            config = LoraConfig(
                # peft types lora_alpha as int; it only divides it by r, so a float alpha is fine
                task_type=TaskType.CAUSAL_LM, r=method.rank, lora_alpha=method.alpha or 2 * method.rank,  # type: ignore[arg-type]
                lora_dropout=0.0, target_modules=list(method.targets), layers_to_transform=layers, bias="none",
            )
        else:
            raise ValueError(f"PeftTrainee takes prompt_tuning, prefix_tuning or lora, not {method.kind!r}")
        torch.manual_seed(seed)
        # peft's LoRA edits the model it wraps: a copy keeps the shared model clean (a process that owns its
        # model, such as the memory measurement, passes copy_model=False)
        self.model = get_peft_model(copy.deepcopy(lm.model) if copy_model else lm.model, config)
        self.model.eval()  # no dropout anywhere; gradients still flow to the adapter
        self.init_tokens: list[int] | None = None
        self._hook: Any = None
        extra: list[Tensor] = []
        if method.kind == "prefix_tuning":
            self.init_tokens = self._init_prefix(seed)
            if method.layers is not None:
                extra = [self._train_prefix_layers(method.layers)]
        self.params = [p for p in self.model.parameters() if p.requires_grad] + extra
        self.pad_id = lm.tokenizer.pad_token_id

    @torch.no_grad()
    def _init_prefix(self, seed: int) -> list[int]:
        """Set the virtual keys/values to those the model computes for random vocabulary tokens at positions
        ``0..n-1`` (Li & Liang's initialisation from real activations; peft's default, N(0, 1) entries, gives
        keys and values far from the model's and raised SmolLM2's loss on Antonym from 7.5 to 10).

        peft's layout: the embedding row of virtual token ``t`` viewed as ``(2 L, H_kv, h)`` holds layer
        ``l``'s key at ``2 l`` and its value at ``2 l + 1``."""
        from transformers import DynamicCache

        n = self.method.virtual_tokens
        vocab = cast(torch.nn.Embedding, self.lm.model.get_input_embeddings()).num_embeddings
        tokens = torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(seed))
        out = self.lm.model(input_ids=tokens.to(self.lm.device), cache=DynamicCache(config=self.lm.model.config),
                            use_cache=True, logits_to_keep=1)
        kv = torch.stack([torch.stack([layer.keys[0], layer.values[0]]) for layer in out.cache.layers])  # (L, 2, H, n, h)
        encoder: Any = self.model.prompt_encoder[self.model.active_adapter]  # peft's PrefixEncoder
        weight = encoder.embedding.weight
        if kv[0, 0].numel() * 2 * kv.shape[0] != weight.numel():
            raise ValueError(f"prefix of {weight.numel()} values cannot hold the model's keys/values {tuple(kv.shape)}")
        weight.copy_(kv.permute(3, 0, 1, 2, 4).reshape(n, -1).to(weight.dtype))
        return tokens[0].tolist()

    def _train_prefix_layers(self, layers: Sequence[int]) -> Tensor:
        """Freeze the prefix and train, at ``layers`` only, a change ``(n, 2 len(layers) H_kv h)`` of its keys and
        values (zero at the start), added to the prefix encoder's output by a forward hook (removed by
        :meth:`close`). peft's layout puts layer ``l``'s key at rows ``2 l`` and its value at ``2 l + 1`` of the
        ``(2 L, H_kv, h)`` view of a virtual token's embedding."""
        g = self.lm.geometry
        kv = g.n_kv_heads * g.head_dim
        for l in layers:
            check_layer(l, self.lm.n_layers)
        encoder: Any = self.model.prompt_encoder[self.model.active_adapter]
        weight = encoder.embedding.weight
        weight.requires_grad_(False)
        index = torch.cat([torch.arange(2 * l * kv, (2 * l + 2) * kv) for l in layers]).to(weight.device)
        delta = torch.zeros(weight.shape[0], len(index), dtype=weight.dtype, device=weight.device, requires_grad=True)

        def add_delta(module: Any, args: tuple, output: Tensor) -> Tensor:
            return output.index_add(-1, index, delta.expand(*output.shape[:-1], -1))

        self._hook = encoder.register_forward_hook(add_delta)
        return delta

    def logits(self, prompts, index, answers):
        rows = [list(prompts.shared) + list(prompts.rows[i]) for i in index]
        ids, mask, valid, n = _teacher_forced(self.pad_id, rows, answers, self.lm.device)
        if self.method.kind == "prompt_tuning":
            # peft's forward drops position_ids for prompt tuning; this is that forward with positions that
            # skip the padding between the virtual tokens and the prompt.
            # peft infers word_embeddings' type from its `None` placeholder; it is the model's nn.Embedding
            embeds = self.model.word_embeddings(ids)  # type: ignore[misc]
            virtual = self.model.get_prompt(batch_size=ids.shape[0]).to(embeds.dtype)
            mask = torch.cat([torch.ones(ids.shape[0], virtual.shape[1], dtype=mask.dtype, device=mask.device), mask], 1)
            out = self.model.base_model(
                inputs_embeds=torch.cat([virtual, embeds], 1), attention_mask=mask,
                position_ids=positions_from_mask(mask), logits_to_keep=n, use_cache=False,
            )
        elif self.method.kind == "lora":
            # use_cache=False: no key/value cache of the batch is kept (as on the LTV's path)
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask),
                             logits_to_keep=n, use_cache=False)
        else:
            # prefix tuning: peft builds the virtual keys/values as a Cache and shifts position_ids by n itself;
            # the model appends the batch's keys/values to that cache (memory the other methods do not spend)
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask), logits_to_keep=n)
        return out.logits, valid

    def close(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        del self.model
        self.params = []


def make_trainee(lm: LoadedModel, method: Method, *, init_range: float, seed: int, copy_model: bool = True) -> Trainee:
    """The trainee for ``method`` (LTV: initialised like ``train_ltv``; peft: seeded with ``seed``, on a copy of
    the model unless ``copy_model`` is False, in which case a LoRA adapter modifies ``lm.model`` for good)."""
    if method.kind == "ltv":
        return LTVTrainee(lm, method.layers[0] if method.layers else lm.middle_layer, init_range, seed)
    return PeftTrainee(lm, method, seed, copy_model=copy_model)


# --------------------------------------------------------------------------------------------- training


@dataclass(frozen=True)
class Prepared:
    """A task's prompts and gold tokens, built once and shared by every method."""

    task: Task
    splits: TaskSplits
    train: EncodedPrompts
    val: EncodedPrompts
    test: EncodedPrompts
    train_answers: list[list[int]]
    val_gold: list[int]
    test_gold: list[int]
    label_first: list[int] | None


def prepare(lm: LoadedModel, splits: TaskSplits) -> Prepared:
    task = splits.task
    tok = lm.tokenizer
    first = lambda ex: [a[0] for a in answer_ids(tok, task, [e.output for e in ex])]
    labels = [a[0] for a in answer_ids(tok, task, task.labels)] if task.labels else None
    return Prepared(
        task, splits, encode_prompts(tok, task, splits.train), encode_prompts(tok, task, splits.validation),
        encode_prompts(tok, task, splits.test), answer_ids(tok, task, [e.output for e in splits.train]),
        first(splits.validation), first(splits.test), labels,
    )


@torch.no_grad()
def first_token_accuracy(
    trainee: Trainee, prompts: EncodedPrompts, gold: Sequence[int], *, labels: Sequence[int] | None = None,
    batch_size: int = 64,
) -> tuple[float, float | None, list[bool]]:
    """Accuracy of the top-1 next token over the full vocabulary at the last prompt position (and, for
    classification, of the top-1 among the labels' first tokens), with per-example correctness."""
    correct: list[bool] = []
    label_hits = 0
    for start in range(0, len(prompts), batch_size):
        index = list(range(start, min(start + batch_size, len(prompts))))
        logits, _ = trainee.logits(prompts, index, None)
        last = logits[:, -1].float()
        g = torch.tensor([gold[i] for i in index], device=last.device)
        correct += (last.argmax(-1) == g).tolist()
        if labels is not None:
            lab = torch.tensor(list(labels), device=last.device)
            label_hits += int((lab[last[:, lab].argmax(-1)] == g).sum())
    acc = sum(correct) / len(correct)
    return acc, (label_hits / len(correct) if labels is not None else None), correct


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_and_measure(
    lm: LoadedModel, prepared: Prepared, method: Method, schedule: TrainConfig, *, seed: int = 0, eval_batch: int = 64,
    progress: Callable[[str], None] | None = None, rule: StoppingRule | None = None,
) -> dict[str, Any]:
    """Train ``method`` on the schedule's batches under the shared early-stopping rule, then evaluate it on
    the test split.

    Args:
        schedule: the batches (``epochs x samples_per_epoch`` samples: the sample budget), weight decay and the
            LTV's initialisation.
        rule: the early-stopping rule (default :meth:`StoppingRule.from_config` of ``schedule``, the rule
            ``train_ltv`` applies).

    Returns:
        A JSON-ready dict: ``trainable_params`` (counted on the built adapter), ``formula_params``, ``formula``,
        ``params_in_d``, ``test_accuracy``, ``test_label_accuracy``, ``best_val_accuracy`` and
        ``best_val_score`` (the rule's ``val_metric``) of the kept parameters, ``steps``, ``samples_seen``,
        ``sample_budget``, ``steps_to_best``, ``samples_to_best``, ``seconds_to_best`` (training seconds,
        validation excluded), ``wall_seconds_to_best`` (validation included), ``train_seconds``,
        ``wall_seconds``, ``median_step_seconds``, ``step_seconds``, ``rule``, ``n_validations``, ``curve``
        (per validation: ``epoch``, ``step``, ``samples``, ``train_seconds``, ``wall_seconds``,
        ``val_accuracy``, ``val_balanced_accuracy``, ``val_score``, ``loss`` = mean training loss since the
        previous validation), ``latency_ms`` (test inference per example), on CUDA ``peak_train_mb`` /
        ``peak_infer_mb``; ``test_correct`` (0/1 per test query, in the split's order: the paired comparisons'
        input), ``start_val_score`` (the starting parameters' score), ``trained`` (the kept score strictly above
        the start, as ``LearnedTaskVector.training.trained``), ``stopped_by_rule`` (the rule's patience ran out within
        the sample budget, at its last validation included: converged by the rule's definition) and ``seed``.

    Raises:
        FloatingPointError: the loss became NaN or infinite.
    """
    from ..evaluate import balanced_accuracy

    rule = rule or StoppingRule.from_config(schedule)
    metric = rule.metric_for(prepared.task)
    trainee = make_trainee(lm, method, init_range=schedule.init_range, seed=seed)
    device = lm.device
    cuda = device.type == "cuda"
    val_outputs = [e.output for e in prepared.splits.validation]
    try:
        expected, formula = parameter_formula(lm, method)
        opt = torch.optim.AdamW(trainee.params, lr=method.lr, weight_decay=schedule.weight_decay)
        epochs = batch_schedule(len(prepared.splits.train), schedule, seed)
        batches = [(epoch, index) for epoch, e in enumerate(epochs, start=1) for index in e]
        checkpoints = set(rule.checkpoints([index for _, index in batches]))
        total = len(batches)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / total))
        start = time.perf_counter()

        def validate(epoch: int, step: int, samples: int, losses: list[float]) -> float:
            _, _, correct = first_token_accuracy(trainee, prepared.val, prepared.val_gold, batch_size=eval_batch)
            acc = sum(correct) / len(correct)
            balanced = balanced_accuracy(correct, val_outputs) if prepared.task.labels else None
            score = balanced if metric == "balanced_accuracy" and balanced is not None else acc
            curve.append({"epoch": epoch, "step": step, "samples": samples, "train_seconds": sum(step_seconds),
                          "wall_seconds": time.perf_counter() - start, "val_accuracy": acc,
                          "val_balanced_accuracy": balanced, "val_score": score,
                          "loss": sum(losses) / len(losses) if losses else float("nan")})
            return score

        curve: list[dict[str, Any]] = []
        step_seconds: list[float] = []
        stopper = EarlyStopping(rule, validate(0, 0, 0, []))
        best_state, best = trainee.state(), curve[0]
        step, samples, losses = 0, 0, []
        stopped = False
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        for b, (epoch, index) in enumerate(batches):
            answers = [prepared.train_answers[i] for i in index]
            _sync(device)
            t0 = time.perf_counter()
            logits, valid = trainee.logits(prepared.train, index, answers)
            loss = answer_loss(logits, answers, valid)
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"{method.name} on {prepared.task.name}: loss {loss.item()} at step {step} (lr {method.lr})"
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            _sync(device)
            step_seconds.append(time.perf_counter() - t0)
            losses.append(loss.item())
            step += 1
            samples += len(index)
            if b not in checkpoints:
                continue
            score = validate(epoch, step, samples, losses)
            losses = []
            if progress:
                progress(f"{prepared.task.name} {method.name} {samples} samples: loss {curve[-1]['loss']:.3f} "
                         f"val {curve[-1]['val_accuracy']:.3f}")
            if stopper.observe(score):
                best_state, best = trainee.state(), curve[-1]
            elif stopper.stop:
                stopped = True
                break
        peak_train = torch.cuda.max_memory_allocated(device) / 2**20 if cuda else None
        wall = time.perf_counter() - start
        trainee.load(best_state)
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        _sync(device)
        t0 = time.perf_counter()
        test_acc, label_acc, correct = first_token_accuracy(
            trainee, prepared.test, prepared.test_gold, labels=prepared.label_first, batch_size=eval_batch
        )
        _sync(device)
        infer_seconds = time.perf_counter() - t0
        peak_infer = torch.cuda.max_memory_allocated(device) / 2**20 if cuda else None
        return {
            "method": method.name, "kind": method.kind, "budget": method.budget, "lr": method.lr,
            "trainable_params": trainee.n_trainable(), "formula_params": expected, "formula": formula,
            "params_in_d": parameter_units(lm, method),
            "test_accuracy": test_acc, "test_label_accuracy": label_acc, "n_test": len(correct),
            "best_val_accuracy": best["val_accuracy"], "best_val_score": best["val_score"], "val_metric": metric,
            "rule": asdict(rule), "n_validations": len(curve), "sample_budget": sum(len(i) for _, i in batches),
            "steps": step, "samples_seen": samples, "steps_to_best": best["step"], "samples_to_best": best["samples"],
            "seconds_to_best": best["train_seconds"], "wall_seconds_to_best": best["wall_seconds"],
            "train_seconds": sum(step_seconds), "wall_seconds": wall,
            "median_step_seconds": statistics.median(step_seconds) if step_seconds else float("nan"),
            "step_seconds": step_seconds, "curve": curve,
            "latency_ms": 1000 * infer_seconds / len(correct), "eval_batch": eval_batch,
            "peak_train_mb": peak_train, "peak_infer_mb": peak_infer,
            "initial_loss": curve[1]["loss"] if len(curve) > 1 else float("nan"),
            "test_correct": [int(c) for c in correct], "start_val_score": curve[0]["val_score"],
            "trained": best["val_score"] > curve[0]["val_score"], "stopped_by_rule": stopped,
            "seed": seed,
        }
    finally:
        trainee.close()


# ---------------------------------------------------------------------------------------------- memory


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak_rss() -> None:
    # Linux >= 4.0: writing 5 resets VmHWM (peak resident set) to the current resident set size.
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def measure_memory_here(lm: LoadedModel, prepared: Prepared, method: Method, schedule: TrainConfig, *, seed: int = 0,
                        eval_batch: int = 64) -> dict[str, float]:
    """Peak resident memory (MiB) of one inference batch of test prompts, then of two training steps on
    the schedule's first two batches, in *this* process (run it in a fresh one: :func:`measure_memory`).

    The adapter wraps ``lm.model`` itself (no copy). ``base_mb`` is the resident size after one forward of a
    single prompt (every weight paged in), before the measured batches."""
    trainee = make_trainee(lm, method, init_range=schedule.init_range, seed=seed, copy_model=False)
    try:
        opt = torch.optim.AdamW(trainee.params, lr=method.lr, weight_decay=schedule.weight_decay)
        first_token_accuracy(trainee, prepared.test.select([0]), prepared.test_gold, batch_size=1)
        base = _rss_kb("VmRSS")
        _reset_peak_rss()
        first_token_accuracy(trainee, prepared.test.select(range(min(eval_batch, len(prepared.test)))),
                             prepared.test_gold, batch_size=eval_batch)
        infer = _rss_kb("VmHWM")
        _reset_peak_rss()
        for index in batch_schedule(len(prepared.splits.train), schedule, seed)[0][:2]:
            answers = [prepared.train_answers[i] for i in index]
            logits, valid = trainee.logits(prepared.train, index, answers)
            loss = answer_loss(logits, answers, valid)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        train = _rss_kb("VmHWM")
        return {"base_mb": base / 1024, "peak_infer_mb": infer / 1024, "peak_train_mb": train / 1024}
    finally:
        trainee.close()


def measure_memory(model: str, device: str, splits_spec: dict[str, Any], method: Method, schedule: TrainConfig,
                   seed: int = 0, eval_batch: int = 64) -> dict[str, float]:
    """:func:`measure_memory_here` in a fresh Python process (CPU resident memory), keyed like the run."""
    payload = json.dumps({"model": model, "device": device, "splits": splits_spec, "method": asdict(method),
                          "schedule": asdict(schedule), "seed": seed, "eval_batch": eval_batch})
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                         env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-m", "ltvlib.analysis.peft_compare", "memory", payload], capture_output=True,
                         text=True, env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"memory measurement of {method.name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _method_from_dict(d: dict[str, Any]) -> Method:
    d = dict(d)
    d["targets"] = tuple(d["targets"])
    d["layers"] = tuple(d["layers"]) if d["layers"] is not None else None
    return Method(**d)


# ------------------------------------------------------------------------------------------ comparison


def compare_splits(task: str, sizes: CompareSizes) -> TaskSplits:
    """The task's split (seed 0, 400 validation queries, as every chapter) cut to the comparison's sizes."""
    s = load_splits(task, seed=0, n_train=sizes.n_train, n_val=400)
    test = s.test if sizes.n_test is None else s.test[: sizes.n_test]
    return TaskSplits(s.task, s.train, s.validation[: sizes.n_val], test, s.seed)


#: an LTV trained in the race, described as :class:`ltvlib.study.ltv_report.LTVLedger` reads a vector: whether it
#: trained (its kept validation score strictly above its random start's) gates every number shown of it
RaceLTV = LTVRecord


def race_ltv(result: dict[str, Any], task: str, layer: int, recipe: str) -> RaceLTV:
    """The :class:`RaceLTV` of one ``"ltv"`` run of :func:`train_and_measure` (``recipe``: a label such as
    ``"race-fast"``, so the ledger tells it from the book's other LTVs)."""
    if result["kind"] != "ltv":
        raise ValueError(f"race_ltv takes an LTV run, got {result['kind']!r} ({result['method']})")
    return RaceLTV(task=task, layers=(int(layer),), positions=(-1,), seed=int(result["seed"]), recipe=recipe,
                   trained=bool(result["trained"]), start_val_score=float(result["start_val_score"]),
                   best_val_score=float(result["best_val_score"]), steps_to_best=int(result["steps_to_best"]))


def correct_matrix(runs: Sequence[dict[str, Any]]) -> Any:
    """Per-query correctness of several runs (seeds) on the same test queries, as a ``(seeds, queries)`` array."""
    import numpy as np

    if not runs:
        raise ValueError("correct_matrix: no runs")
    lengths = {len(r["test_correct"]) for r in runs}
    if len(lengths) != 1:
        raise ValueError(f"runs were tested on different numbers of queries: {sorted(lengths)}")
    return np.array([r["test_correct"] for r in runs], dtype=float)


def step_time_ratio(a_runs: Sequence[dict[str, Any]], b_runs: Sequence[dict[str, Any]], *, skip_first: int = 1,
                    n_resamples: int = 2000, confidence: float = 0.95, seed: int = 0) -> Any:
    """How long method ``a``'s training step takes relative to method ``b``'s on the same batches.

    Steps pair up by seed and step number (the same seed draws the same batches for every method,
    :func:`batch_schedule`); the first ``skip_first`` steps of each run are left out (warm-up), and pairs exist
    up to the shorter run. The value is the geometric mean of the per-step ratios ``a / b``; the interval a
    percentile bootstrap over the step pairs. Returns an :class:`ltvlib.stats.Estimate` whose value is the
    ratio (1.0 = as fast; ``format_estimate`` prints it in percent), ``n`` the step pairs, ``seeds`` the seeds.
    """
    import numpy as np

    from ..stats import Estimate

    by_seed = {r["seed"]: r for r in b_runs}
    logs: list[float] = []
    seeds = 0
    for ra in a_runs:
        rb = by_seed.get(ra["seed"])
        if rb is None:
            continue
        pairs = list(zip(ra["step_seconds"], rb["step_seconds"]))[skip_first:]
        logs += [math.log(x / y) for x, y in pairs if x > 0 and y > 0]
        seeds += 1 if pairs else 0
    if not logs:
        raise ValueError("step_time_ratio: no paired steps (different seeds, or runs too short)")
    arr = np.array(logs)
    rng = np.random.default_rng(seed)
    draws = arr[rng.integers(0, len(arr), size=(n_resamples, len(arr)))].mean(axis=1)
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(draws, [alpha, 1 - alpha])
    value = math.exp(arr.mean())
    return Estimate(value, min(math.exp(lo), value), max(math.exp(hi), value), n=len(arr), seeds=max(seeds, 1),
                    confidence=confidence, method="paired bootstrap of log step-time ratios", resamples=n_resamples)


def race_curve(runs: Sequence[dict[str, Any]], n_val: int) -> list[dict[str, float]]:
    """Validation accuracy against samples seen and time, averaged over the seeds, per validation point.

    Every run of a race validates at the same sample counts (the shared schedule and rule); point ``k`` averages
    the seeds still training there (a run the rule stopped has no later points). Returns per point: ``samples``,
    ``wall_seconds`` and ``train_seconds`` (means over those seeds), ``val_accuracy`` (their mean), ``low`` and
    ``high`` (the Wilson interval of the pooled ``n_val x seeds`` validation answers) and ``seeds``."""
    from ..stats import wilson_interval

    out = []
    for k in range(max(len(r["curve"]) for r in runs)):
        points = [r["curve"][k] for r in runs if len(r["curve"]) > k]
        hits = round(sum(p["val_accuracy"] * n_val for p in points))
        lo, hi = wilson_interval(hits, n_val * len(points))
        out.append({"samples": _mean(points, "samples"), "wall_seconds": _mean(points, "wall_seconds"),
                    "train_seconds": _mean(points, "train_seconds"), "val_accuracy": _mean(points, "val_accuracy"),
                    "low": lo, "high": hi, "seeds": len(points)})
    return out


def _mean(points: Sequence[dict[str, Any]], key: str) -> float:
    return sum(p[key] for p in points) / len(points)


def main(argv: Sequence[str]) -> None:
    """``python -m ltvlib.analysis.peft_compare memory '<json>'``: one memory measurement in this fresh process."""
    if len(argv) != 2 or argv[0] != "memory":
        raise SystemExit("usage: python -m ltvlib.analysis.peft_compare memory '<json payload>'")
    from ..models import load_model

    spec = json.loads(argv[1])
    torch.manual_seed(0)
    lm = load_model(spec["model"], device=spec["device"])
    s = spec["splits"]
    sz = s["sizes"]
    schedule = TrainConfig(**spec["schedule"])
    rule = StoppingRule(**sz["rule"]) if sz.get("rule") else None
    sizes = CompareSizes(sz["n_train"], sz["n_val"], sz["n_test"], schedule, sz["eval_batch"], sz["memory"], rule)
    prepared = prepare(lm, compare_splits(s["task"], sizes))
    result = measure_memory_here(lm, prepared, _method_from_dict(spec["method"]), schedule, seed=spec["seed"],
                                 eval_batch=spec["eval_batch"])
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])


__all__ = [
    "BUDGETS",
    "KINDS",
    "CompareSizes",
    "EarlyStopping",
    "LTVTrainee",
    "Method",
    "PeftTrainee",
    "Prepared",
    "RaceLTV",
    "StoppingRule",
    "Trainee",
    "batch_schedule",
    "compare_splits",
    "correct_matrix",
    "default_methods",
    "equal_budget_methods",
    "first_token_accuracy",
    "make_trainee",
    "measure_memory",
    "measure_memory_here",
    "parameter_formula",
    "parameter_units",
    "prepare",
    "projection_shape",
    "race_curve",
    "race_ltv",
    "race_methods",
    "step_time_ratio",
    "time_to_accuracy",
    "train_and_measure",
    "usual_methods",
]
