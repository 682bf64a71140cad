"""Prepare what the GPU smoke run (bench/gpu_smoke.sh) carries to the device machine, which reaches no registry.

Run here (where pip reaches the registries), in the repository root, with the project's environment:

    .venv/bin/python bench/gpu_wheels.py            # fills .whl/ and .gpu-cache/ (both git-ignored)

1. ``.whl/``: Python 3.12 x86-64 wheels of every distribution the book's chapters import (``ltvlib``'s
   dependencies, papermill, jupytext, ipykernel and what they require, markers evaluated for CPython 3.12 on
   Linux), at the versions installed in this environment, **except** those the device image already holds
   (:data:`DEVICE_HAS`, its package list as the device tool's KINDS.md gives it) and torch. The distributions in
   :data:`PINNED` are carried even though the image has them: the image's transformers (5.17) is older than the
   5.20 this project requires, and the tokenizer, hub and PEFT versions must match it.
2. ``.gpu-cache/models/smollm2-135m/``: the embedded SmolLM2 tokenizer files only (no weights, no ``config.json``,
   so nothing takes the folder for a dequantised model): ``random:<shape>`` models then use SmolLM2's
   49,152-token vocabulary, as on this machine, instead of the byte-level fallback.

It prints the wheels and their total size: the working tree, ``.whl`` and ``.gpu-cache`` travel together within
the device tool's 64 MiB.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as canonical

ROOT = Path(__file__).resolve().parents[1]

ROOTS = ("transformers", "accelerate", "safetensors", "datasets", "tqdm", "numpy", "peft", "pyyaml", "gguf",
         "papermill", "jupytext", "ipykernel", "nbformat", "nbclient", "jupyter-client", "matplotlib", "seaborn",
         "pandas", "scikit-learn", "psutil")
"""What the chapters and ``python -m ltvlib.book build --no-html`` import (pyproject's dependencies and its
``book`` extra, without the HTML build's jupyter-book and Sphinx)."""

PINNED = frozenset({"transformers", "tokenizers", "huggingface-hub", "peft", "accelerate", "safetensors"})

SKIPPED = frozenset({"debugpy", "jedi", "kernels"})
"""Required on paper but imported only for what a smoke run never does (ipykernel's debugger, IPython's completer,
transformers' hub kernels: each import is guarded); left behind to stay within the 64 MiB the device tool carries."""

# The device image's Python packages (the device tool's KINDS.md, "Python packages already there", read
# 2026-11-17); torch, CUDA and Triton are the image's own and never carried.
_DEVICE_LIST = """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy
peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile
tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm
transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel
wrapt xarray xxhash yarl zipp
"""
DEVICE_HAS = frozenset(_DEVICE_LIST.split())

NEVER = frozenset({"torch", "triton"})
DEVICE_PYTHON = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
                 "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
                 "implementation_name": "cpython", "platform_python_implementation": "CPython"}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def closure(roots: tuple[str, ...]) -> dict[str, str]:
    """Every distribution ``roots`` need on the device's Python (markers evaluated there, no extras), with the
    version installed here. A requirement not installed here stops with its name."""
    seen: dict[str, str] = {}
    todo = [canonical(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen or name in NEVER or name in SKIPPED:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            if name in DEVICE_HAS:  # the image has it (e.g. aiohttp, which datasets needs and this CPU venv lacks)
                continue
            raise SystemExit(f"{name} is needed on the device but not installed here; run scripts/book.sh --setup-only")
        seen[name] = dist.version
        if name in DEVICE_HAS and name not in PINNED:
            continue  # the image's own version comes with its own requirements
        for text in dist.requires or ():
            req = Requirement(text)
            if req.marker is not None and not Marker(str(req.marker)).evaluate({**DEVICE_PYTHON, "extra": ""}):
                continue
            todo.append(canonical(req.name))
    return seen


def carried(needed: dict[str, str]) -> dict[str, str]:
    return {n: v for n, v in sorted(needed.items()) if n in PINNED or n not in DEVICE_HAS}


def download(wanted: dict[str, str], dest: Path, python: str = "3.12") -> None:
    dest.mkdir(exist_ok=True)
    for old in dest.glob("*.whl"):
        old.unlink()
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    specs = [f"{n}=={v}" for n, v in wanted.items()]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", python, "--implementation", "cp", *platforms, "-d", str(dest), *specs],
                   check=True)


def copy_tokenizer(dest: Path) -> None:
    from ltvlib.cache import cache_root

    source = cache_root() / "models" / "smollm2-135m"
    if not (source / "tokenizer.json").is_file():
        raise SystemExit(f"no SmolLM2 tokenizer in {source}; run scripts/book.sh --setup-only first")
    target = dest / "models" / "smollm2-135m"
    target.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, target / name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print what would be carried, download nothing")
    ap.add_argument("--device-held", action="store_true",
                    help="print the image's distributions the chapters need (to emulate the device in a test venv)")
    ap.add_argument("--python-version", default="3.12", help="the wheels' Python (3.12 on the device)")
    ap.add_argument("--dest", type=Path, default=ROOT / ".whl")
    args = ap.parse_args()
    needed = closure(ROOTS)
    wanted = carried(needed)
    if args.list or args.device_held:
        shown = wanted if args.list else {n: v for n, v in needed.items() if n not in wanted}
        print("\n".join(f"{n}=={v}" for n, v in shown.items()))
        return
    download(wanted, args.dest, args.python_version)
    copy_tokenizer(ROOT / ".gpu-cache")
    wheels = sorted(args.dest.glob("*.whl"))
    for w in wheels:
        print(f"{w.stat().st_size / 2**20:6.2f} MiB  {w.name}")
    size = sum(w.stat().st_size for w in wheels) + sum(
        f.stat().st_size for f in (ROOT / ".gpu-cache").rglob("*") if f.is_file())
    print(f"{len(wheels)} wheels for {len(wanted)} distributions; .whl + .gpu-cache: {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
