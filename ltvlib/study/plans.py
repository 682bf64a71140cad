"""Plans: the only module that reads a profile. It turns a chapter's ``profile`` and ``recipe`` parameters into the
concrete values the rest of the library takes: tasks, seeds, layers, split and test sizes, the LTV recipe
(:class:`~ltvlib.study.ltvs.RunSizes`) and each chapter's own sizes. One function per chapter
(:func:`overview_plan` ... :func:`across_models_plan`) returns a frozen plan; an unknown profile or recipe raises
one ``ValueError`` in :func:`get_profile`, naming it and the allowed values.

Run profiles: how much data and compute a chapter spends.

- ``smoke``: seconds per chapter; checks that everything runs (tests, CI). Numbers are not meaningful.
- ``cpu`` (default): the book as built on a 2-core CPU with the embedded model; fewer test queries and a
  layer subset, every claim still measured.
- ``paper``: the paper's sizes (600/400 train/validation, full test sets, every layer) and the paper's
  released LTV recipe (:data:`~ltvlib.ltv.PAPER_RECIPE`: batch 1, lr 5e-3, full forwards), for a GPU.

Any profile can train with another recipe: ``get_profile("cpu", recipe="paper")`` (the released recipe at
the ``cpu`` sizes) or ``get_profile("paper", recipe="fast")`` (the paper's sizes with the book's fast
recipe, validating on all of the profile's validation queries as the paper's recipe does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

# the sizes and configs come from leaf modules, not from the studies and analyses that use them: a chapter's code
# closure (its stamp and cache keys) then holds only the studies it runs
from ..analysis.configs import CompareSizes, LinearityConfig
from ..baselines.function_vector import FunctionVectorConfig
from ..baselines.vanilla_tv import VanillaTVConfig
from ..ltv import FAST_RECIPE, PAPER_RECIPE, RECIPES, TrainConfig, absolute_recipe, with_config
from ..tasks import PAPER_TASKS, get_task
from .ltvs import RunSizes, spread_layers
from .sizes import AcrossModelsSizes, CompositionSizes, FlexSizes, GeneralizationSizes, MyopicSizes


@dataclass(frozen=True)
class Profile:
    """Sizes shared by the chapters.

    Attributes:
        name: smoke, cpu or paper.
        tasks: the tasks a chapter covers by default.
        ltv_tasks: the tasks whose LTVs the overview trains.
        n_train, n_val: LTV training and validation queries per task (the ``cpu`` profile validates on 200
            instead of the paper's 400: the long-prompt tasks' validation passes dominate training time).
        n_test: test queries per task (None = the whole test split).
        n_test_icl: test queries for k-shot evaluations, whose prompts are long.
        icl_shots: demonstration counts of the ICL references.
        icl_demo_sets: fixed demonstration blocks for k-shot evaluation (None = fresh demos per query).
        recipe: the LTV training config (``smoke``: a one-epoch fast recipe; ``cpu``: the fast recipe;
            ``paper``: the released recipe). Choose another with :func:`get_profile`'s ``recipe``.
        n_sweep_layers: layers in a layer sweep (None = every layer).
        headline_seeds: training seeds of the headline middle-layer LTVs of chapters 00 and 01 (offsets to a
            chapter's ``seed``; :func:`headline_seeds`): ``cpu`` and ``paper`` train three, so
            an interval across seeds covers training noise as well as the test queries; later chapters reuse
            the same vectors from the cache.
    """

    name: str
    tasks: tuple[str, ...]
    ltv_tasks: tuple[str, ...]
    n_train: int
    n_val: int
    n_test: int | None
    n_test_icl: int | None
    icl_shots: tuple[int, ...]
    icl_demo_sets: int | None
    recipe: TrainConfig
    n_sweep_layers: int | None
    headline_seeds: tuple[int, ...] = (0,)


def profile_recipe(profile_name: str, recipe: str) -> TrainConfig:
    """The LTV recipe ``recipe`` (``"fast"`` or ``"paper"``) as the profile ``profile_name`` runs it.

    ``paper`` is always the released recipe as released. ``fast`` is :data:`~ltvlib.ltv.FAST_RECIPE`, with
    one epoch of 32 queries in ``smoke`` (seconds; numbers not meaningful) and validation on every
    validation query in ``paper`` (as the released recipe does)."""
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; allowed: {', '.join(RECIPES)}")
    if recipe == "paper":
        return PAPER_RECIPE
    if profile_name == "smoke":
        return with_config(FAST_RECIPE, epochs=1, samples_per_epoch=32)
    if profile_name == "paper":
        return with_config(FAST_RECIPE, val_queries=None)
    return FAST_RECIPE


PROFILES: dict[str, Profile] = {
    "smoke": Profile(
        name="smoke", tasks=("antonym", "sst2"), ltv_tasks=("antonym", "sst2"), n_train=32, n_val=16, n_test=16,
        n_test_icl=8, icl_shots=(2,),
        icl_demo_sets=2, recipe=profile_recipe("smoke", "fast"), n_sweep_layers=3,
        headline_seeds=(0, 1),
    ),
    "cpu": Profile(
        name="cpu", tasks=PAPER_TASKS, ltv_tasks=PAPER_TASKS, n_train=600, n_val=200, n_test=200, n_test_icl=200,
        icl_shots=(5, 10),
        icl_demo_sets=8, recipe=profile_recipe("cpu", "fast"), n_sweep_layers=10,
        headline_seeds=(0, 1, 2),
    ),
    "paper": Profile(
        name="paper", tasks=PAPER_TASKS, ltv_tasks=PAPER_TASKS, n_train=600, n_val=400, n_test=None, n_test_icl=None,
        icl_shots=(5, 10),
        icl_demo_sets=None, recipe=profile_recipe("paper", "paper"), n_sweep_layers=None,
        headline_seeds=(0, 1, 2),
    ),
}


def get_profile(name: str, recipe: str | None = None) -> Profile:
    """The profile called ``name``, optionally with another LTV recipe.

    Args:
        name: ``smoke``, ``cpu`` or ``paper``.
        recipe: None: the profile's own (``fast`` for smoke and cpu, the released ``paper`` recipe for paper);
            ``"fast"`` or ``"paper"``: that recipe at the profile's sizes (:func:`profile_recipe`).

    Raises:
        ValueError: an unknown profile or recipe, naming it and the allowed values.
    """
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; allowed: {', '.join(PROFILES)}")
    if recipe is None:
        return PROFILES[name]
    config = profile_recipe(name, recipe)
    return PROFILES[name] if config == PROFILES[name].recipe else replace(PROFILES[name], recipe=config)




@dataclass(frozen=True)
class ExtractedSizes:
    """Extraction configs and LTV-sweep coverage of one profile.

    Attributes:
        vanilla_tv: the Vanilla TV config (its ``template`` is overridden per call where a chapter says so).
        function_vector: the Function Vector config.
        ltv_sweep_tasks: tasks whose LTV is trained at several layers (None = all the profile's tasks);
            LTVs of the other tasks are trained at the middle layer only.
        ltv_sweep_layers: how many evenly spread layers those LTVs get (plus the middle layer); None = the
            profile's sweep layers. Training one LTV costs 10-60 s on a CPU; extracted vectors cost
            one single-token pass per layer, so they always get the profile's full sweep.
    """

    vanilla_tv: VanillaTVConfig
    function_vector: FunctionVectorConfig
    ltv_sweep_tasks: tuple[str, ...] | None
    ltv_sweep_layers: int | None = None


def run_sizes(profile: Profile) -> RunSizes:
    """The concrete sizes every chapter of ``profile`` shares: splits, test sizes, demonstration blocks, the LTV
    recipe, the layer-sweep size and the extraction configs (:data:`EXTRACTED_SIZES`)."""
    ex = EXTRACTED_SIZES[profile.name]
    return RunSizes(n_train=profile.n_train, n_val=profile.n_val, n_test=profile.n_test, n_test_icl=profile.n_test_icl,
                    icl_demo_sets=profile.icl_demo_sets, recipe=profile.recipe, n_sweep_layers=profile.n_sweep_layers,
                    vanilla_tv=ex.vanilla_tv, function_vector=ex.function_vector)


def sweep_layers(n_layers: int, profile: Profile) -> list[int]:
    """Evenly spread layers from 0 to ``n_layers - 1`` (all of them when the profile says so)."""
    return spread_layers(n_layers, profile.n_sweep_layers)


def headline_seeds(profile: Profile, seed: int = 0) -> tuple[int, ...]:
    """The training seeds of the profile's headline LTVs, offset by a chapter's ``seed`` parameter
    (``cpu``: 0, 1, 2 for ``seed=0``)."""
    return tuple(seed + s for s in profile.headline_seeds)


def table_layers(n_layers: int, profile: Profile) -> list[int]:
    """Chapter 01's layers for the extracted vectors: the profile's sweep layers and the middle layer (the list is
    part of the cached curve's key, so chapter 08 reuses chapter 01's curves by taking exactly this list)."""
    return sorted(set(sweep_layers(n_layers, profile)) | {n_layers // 2})


EXTRACTED_SIZES: dict[str, ExtractedSizes] = {
    "smoke": ExtractedSizes(
        vanilla_tv=VanillaTVConfig(n_contexts=2, n_dev=8),
        function_vector=FunctionVectorConfig(shots=4, n_mean=4, n_ie=2),
        ltv_sweep_tasks=("antonym",),
        ltv_sweep_layers=2,
    ),
    "cpu": ExtractedSizes(
        vanilla_tv=VanillaTVConfig(n_contexts=8, n_dev=50),
        function_vector=FunctionVectorConfig(n_mean=20, n_ie=5),
        # The four short-prompt tasks get six spread layers (0, 6, 12, 17, 23, 29 of 30, plus the middle one):
        # 24 more LTVs, about 10 CPU-minutes. Ten layers (40 LTVs, about 15 minutes) no longer fit chapter 01's
        # budget once its middle-layer LTVs have three seeds. SST-2, SNLI and RTE prompts are 3-13 times longer,
        # and one of their LTVs costs 1.5-4 minutes at the middle layer, more at early layers.
        ltv_sweep_tasks=("capital", "capitalize", "antonym", "trec"),
        ltv_sweep_layers=6,
    ),
    "paper": ExtractedSizes(
        vanilla_tv=VanillaTVConfig(), function_vector=FunctionVectorConfig(), ltv_sweep_tasks=None,
    ),
}


def ltv_layers(n_layers: int, task: str, profile: Profile) -> list[int]:
    """The layers at which the chapters train an LTV of ``task`` in ``profile`` (always with the middle one)."""
    sizes = EXTRACTED_SIZES[profile.name]
    if sizes.ltv_sweep_tasks is not None and task not in sizes.ltv_sweep_tasks:
        return [n_layers // 2]
    k = sizes.ltv_sweep_layers if sizes.ltv_sweep_layers is not None else profile.n_sweep_layers
    return sorted(set(spread_layers(n_layers, k)) | {n_layers // 2})


LINEARITY_SIZES: dict[str, LinearityConfig] = {
    "smoke": LinearityConfig(n_queries=8, fit_factor=1.0, n_heldout=32, scales=(0.5, 1.0, 2.0)),
    "cpu": LinearityConfig(n_queries=32, fit_factor=2.0, n_heldout=256),
    "paper": LinearityConfig(n_queries=64, fit_factor=2.0, n_heldout=1024),
}


def linearity_config(profile: Profile) -> LinearityConfig:
    """The linear fit's sizes of ``profile`` (chapters 05 and 08)."""
    return LINEARITY_SIZES[profile.name]


def linearity_plan(n_layers: int, profile: Profile) -> dict[str, list[int]]:
    """Antonym-centred layer grid of the earlier chapter 05, kept as the grid chapter 08's
    :func:`linearity_layers` picks its layers from (chapter 05 itself now uses
    :func:`mechanism_plan`).

    ``paper``: every task at every layer. ``cpu``: training one LTV costs about a minute on two CPU cores,
    so Antonym gets 8 spread layers (sharing chapter 01's layers 0, 10, 15, 19, 29) and Capitalize and TREC
    (a classification task with short prompts) the middle layer (shared with chapter 00).
    ``smoke``: Antonym at the middle and last layers.
    """
    n, mid = n_layers, n_layers // 2
    if profile.name == "paper":
        return {t: list(range(n)) for t in profile.tasks}
    if profile.name == "cpu":
        antonym = sorted({0, round(n / 7), round(n / 4), n // 3, mid, round(0.63 * n), round(0.8 * n), n - 1})
        return {"antonym": antonym, "capitalize": [mid], "trec": [mid]}
    return {"antonym": [mid, n - 1]}  # smoke


def mechanism_plan(n_layers: int, profile: Profile) -> dict[str, list[int]]:
    """Which (task, layers) chapter 05 covers in ``profile``: label-space tasks first (they decide its
    verdicts), then open-vocabulary tasks beside them.

    ``paper``: every task at every layer. ``cpu``: TREC (a label-space task with short prompts) at the layers
    of chapter 01's TREC sweep (:func:`ltv_layers`, cached vectors) after layer 0, the last layer included, at
    most six of them spread out (with the middle one); SST-2 and Antonym at the middle layer (chapter 00's
    vectors). The chapter measures each of them whose LTV learned.
    ``smoke``: SST-2 at three layers (a quarter, the middle, three quarters), Antonym at the middle layer.
    """
    n, mid = n_layers, n_layers // 2
    if profile.name == "paper":
        labelled = [t for t in profile.tasks if get_task(t).labels]
        return {t: list(range(n)) for t in labelled + [t for t in profile.tasks if t not in labelled]}
    if profile.name == "cpu":
        sweep = [l for l in ltv_layers(n_layers, "trec", profile) if l > 0]
        if len(sweep) > 6:  # six spread layers of the sweep, the middle one among them
            picks = {sweep[round(i * (len(sweep) - 1) / 5)] for i in range(6)}
            sweep = sorted(picks | {mid}) if mid in sweep and len(picks | {mid}) <= 7 else sorted(picks)
        return {"trec": sweep, "sst2": [mid], "antonym": [mid]}
    return {"sst2": sorted({round(n / 4), mid, round(3 * n / 4)}), "antonym": [mid]}  # smoke


FLEX_SIZES: dict[str, FlexSizes] = {
    "smoke": FlexSizes(tasks=("antonym", "sst2"), icl_shots=2, n_late=1, layer_steps=(4,),
                       setting_tasks={n: ("antonym",) for n in ("position4", "layers_x_positions", "icl2")},
                       why_fewer="the smoke profile checks the code paths only"),
    "cpu": FlexSizes(tasks=PAPER_TASKS, n_late=1, layer_steps=(4,), n_test=100),
    "paper": FlexSizes(tasks=PAPER_TASKS, n_late=None, seeds=(0, 1, 2)),
}
"""Per profile. ``paper``: the seven tasks in every column, three seeds each, every layer of the last quarter and
the text-only "every second layer" setting. ``cpu``: the seven tasks in every column of Table 1 and in the
last-layer column; the baseline column with the
three seeds chapter 00 trains (shared cache: no new training), one seed in every other column (40 LTVs); 100
test queries per task (Capital: 50), the same in every column; the table's every-4th-layer column and layer 29
only. ``smoke``: the code paths only (Antonym and SST-2, the dear columns on Antonym alone).

Why, from measured costs (2026-12-02, SmolLM2-135M, two cores shared with other jobs, seconds per LTV): an
LTV's cost grows with the prompt tokens it recomputes (Capital, Capitalize, Antonym and TREC have 6-17-token
zero-shot prompts, SST-2 28, SNLI 39, RTE 82). The four short tasks' columns 28-86 s each; SST-2's P={4} 128,
multi-layer + multi-position 155, 8-shot 145; SNLI's six columns 73-152 (641 in all); RTE's P={4} 757, last five
164, every 4th layer 171, multi-layer + multi-position 204, 8-shot 517, layer 29 232. The chapter with every column on the
seven tasks took 68 minutes on the warm cache (its evaluations about 13 of them); the whole book from a cold
cache would have taken about 158 minutes, past the 150-minute budget; without RTE's two dearest LTVs about 20
minutes less. Three seeds in every column would triple the training part: the ``paper`` profile has them."""


def flex_sizes(profile: Profile) -> FlexSizes:
    """The :data:`FLEX_SIZES` entry of ``profile``."""
    return FLEX_SIZES[profile.name]


GENERALIZATION_SIZES: dict[str, GeneralizationSizes] = {
    "smoke": GeneralizationSizes(tasks=("antonym", "sst2", "snli", "rte"), seeds=(0, 1), fewer_seeds=(("rte", (0,)),),
                                 control_draws=2),
    "cpu": GeneralizationSizes(tasks=PAPER_TASKS, seeds=(0, 1), fewer_seeds=(("snli", (0,)), ("rte", (0,)))),
    "paper": GeneralizationSizes(tasks=PAPER_TASKS, seeds=(0, 1, 2, 3, 4)),
}
"""Per profile. ``cpu`` (chapter 06 held to about 8-10 minutes on two CPU cores, so that the book builds in
about 90): chapter 0 has already trained every task's seed-0 vector, so the cost here is the extra seeds, the
transfer evaluations and the composition vectors (:mod:`ltvlib.study.composition`). Measured single-threaded on the
book's 2-core machine: a second seed costs 25-70 CPU seconds for the short-prompt tasks (Capital, Capitalize,
Antonym, TREC; Antonym 54 s, a third seed still 30 s), about 100 s for SST-2 and for SNLI and over 300 s for
RTE; the 7 x 7 transfer matrix about 4 minutes (each target's test prompts once, then about a second per
vector). So five tasks get two seeds, SNLI and RTE (the costliest) keep chapter 0's single vector. ``smoke``
keeps SNLI and RTE so the SNLI -> RTE cell runs."""


def generalization_sizes(profile: Profile) -> GeneralizationSizes:
    """The :data:`GENERALIZATION_SIZES` entry of ``profile``."""
    return GENERALIZATION_SIZES[profile.name]


COMPOSITION_SIZES: dict[str, CompositionSizes] = {
    "smoke": CompositionSizes(seeds=(0, 1), scales=(0.5, 1.0, 2.0), icl_shots=(2,), test_pairs=16),
    "cpu": CompositionSizes(seeds=(0, 1, 2), scales=(), icl_shots=(5, 10), test_pairs=100),
    "paper": CompositionSizes(seeds=(0, 1, 2, 3, 4), scales=(0.5, 1.0, 1.5, 2.0), icl_shots=(5, 10), test_pairs=100),
}
"""Per profile. 167 pairs: 100 composed test pairs, 20 validation pairs, the rest (fewer after removing every
example that shares a word with a test pair) train. The seeds of one task train together (one batch per step):
the nine vectors of ``cpu`` took 150 s and scoring every method on the 100 pairs for three seeds about 310 CPU
seconds (measured single-threaded on the book's shared 2-core machine; a 3 x 3 grid of scaled sums would add
about 280 s, so ``cpu`` leaves it out: the chapter does not show it). ``paper`` runs five seeds and the 4 x 4
grid."""


def composition_sizes(profile: Profile) -> CompositionSizes:
    """The :data:`COMPOSITION_SIZES` entry of ``profile``."""
    return COMPOSITION_SIZES[profile.name]


MYOPIC_SIZES: dict[str, MyopicSizes] = {
    "smoke": MyopicSizes(n_test=8, icl_shots=(2,), ltv_n_train=16, ltv_n_val=8, extract_shots=2, n_generations=1,
                         max_new_tokens=6, judge_new_tokens=6, random_draws=2),
    "cpu": MyopicSizes(n_test=100, icl_shots=(5,), ltv_n_train=256, ltv_n_val=64, extract_shots=5, n_generations=3,
                       max_new_tokens=24, judge_items=40, judge_new_tokens=16,
                       judge_methods=("zero_shot", "icl5", "ltv", "random"), random_draws=2, ltv_patience=8),
    "paper": MyopicSizes(),
}
"""Per profile. Every prompt here is long for this book (a question with its choices is about 67 tokens, a
5-shot prompt about 400, a 10-shot one about 740), and on a CPU the cost is the number of prompt tokens run
(SmolLM2-135M: about 200 tokens per second per thread, measured). Every measurement is made twice, once per direction,
and the two directions' prompts cannot share their prefixes (each LTV's training computes its own).
``cpu``: 100 balanced held-out questions (50 per letter), each scored zero-shot and per ICL direction four
times (the A/B prompt as given and with its options swapped, the option-text prompt in both orders; the
vectors only rerun the last token over cached prefixes); LTVs on 256 training questions, validated on 64
letter-balanced questions after each of the fast recipe's 8 epochs and run through all of them
(``ltv_patience=8``: the learning rate decays to 0 over the schedule, the best epoch is kept; 1,024 samples,
each question about four times); the extracted vectors with chapter 1's ``cpu`` configs but 5-shot prompts
for the Function Vector too (a 10-shot prompt of these questions is about 740 tokens); one ICL reference at
5 shots; two random vectors of the LTV's norm per direction; greedy answers (16 tokens) judged on the first
40 items for zero-shot, ICL, the LTV and the random vectors; three short free generations. ``smoke`` only checks
that every cell runs: tiny sets and 2-shot prompts."""


def myopic_sizes(profile: Profile) -> MyopicSizes:
    """The :data:`MYOPIC_SIZES` entry of ``profile``."""
    return MYOPIC_SIZES[profile.name]


def compare_sizes(profile: Profile) -> CompareSizes:
    """Sizes of chapter 03's race in ``profile`` and its recipe.

    The schedule is the profile's LTV recipe (``profile.recipe``) made absolute (:func:`absolute_recipe`), at
    the race's sizes; under the ``fast`` recipe:

    ``paper`` and ``cpu``: the fast recipe's own cap and rule, the ones chapter 00's LTVs train under (batches of
    16, at most 8 epochs of 128 samples: a cap of 1,024 samples; validation after every epoch, stop after 2
    validations without a gain, counted after a first gain), so every method trains until validation stops
    improving under a cap within which the LTV reaches its chapter-00 accuracy. ``paper``: 600 training and 200
    validation queries, the whole test split. ``cpu``: every adapter pays a full forward and backward pass per
    step and each method trains three learning rates before its second seed, so validation uses 64 queries and
    the test 200, without the fresh-process memory measurement. Measured on SST-2 with one thread of the shared
    two-core machine: the LTV's run (``train_ltv``) took 101 s and stopped after 768 samples (best at 512, 89.5 %
    on the test queries, chapter 00's accuracy); the one-layer prefix used the whole cap, 64 steps of 4.4 s (384 s
    with validation). ``smoke``: two epochs of one batch of 2, 4 validation and 4 test queries.

    Under the released ``paper`` recipe (batch 1, at most 10 epochs of 100 samples, lr 5e-3 for the LTV) the
    schedule is that recipe in ``cpu`` and ``paper`` (hours on a CPU) and two epochs of 2 samples in ``smoke``.
    """
    name = profile.name
    base = absolute_recipe(profile.recipe)
    paper_recipe = base.recipe == "paper"
    if name == "paper":
        return CompareSizes(600, 200, None, base)
    if name == "cpu":
        return CompareSizes(600, 64, 200, base, eval_batch=32, memory=False)
    # smoke
    schedule = with_config(base, batch_size=1 if paper_recipe else 2, samples_per_epoch=2, epochs=2)
    return CompareSizes(16, 4, 4, schedule, eval_batch=4, memory=False)


ACROSS_MODELS_SIZES: dict[str, AcrossModelsSizes] = {
    # does every cell run, on every model? Antonym in the sweep, SST-2 (a label-space task) for the key heads and
    # the linear fit at the middle and last layers (the last layer's LTV and fit run one block)
    "smoke": AcrossModelsSizes(tasks=("antonym", "sst2"), sweep_tasks=("antonym",), key_head_tasks=("sst2",),
                               n_key_queries=8, n_random=2, linearity_tasks=("sst2",),
                               linearity_fractions=(0.5, 1.0), n_check=3),
    # the mechanism claims are decided on label-space tasks, as chapters 04 and 05 decide them: key heads on SST-2
    # and TREC, the linear reconstruction on TREC (chapter 05's sweep task, whose SmolLM2 LTVs and fits are cache
    # hits); the layer sweep stays on Antonym (chapter 01's claim, not a mechanism)
    "cpu": AcrossModelsSizes(tasks=("antonym", "sst2", "trec"), sweep_tasks=("antonym",),
                             key_head_tasks=("sst2", "trec"), n_key_queries=64, n_random=5, linearity_tasks=("trec",)),
    "paper": AcrossModelsSizes(tasks=None, sweep_tasks=None, key_head_tasks=None,
                               n_key_queries=100, n_random=5, linearity_tasks=None),
}


def across_sizes(profile: Profile) -> AcrossModelsSizes:
    """Chapter 08's coverage in ``profile``."""
    return ACROSS_MODELS_SIZES[profile.name]


def plan_tasks(profile: Profile) -> dict[str, list[str]]:
    """``{"table", "sweep", "key_heads", "linearity"}`` -> task lists of ``profile``, in the paper's
    order."""
    sizes = across_sizes(profile)
    table = list(sizes.tasks or profile.tasks)

    def pick(chosen: tuple[str, ...] | None) -> list[str]:
        return [t for t in table if t in chosen] if chosen is not None else list(table)

    return {"table": table, "sweep": pick(sizes.sweep_tasks),
            "key_heads": pick(sizes.key_head_tasks), "linearity": pick(sizes.linearity_tasks)}


def extracted_layers(n_layers: int, profile: Profile, task: str) -> list[int]:
    """Injection layers of ``task``'s extracted vectors: chapter 01's (:func:`table_layers`) for the tasks of the
    layer sweep and in ``paper``, the middle layer alone for the other tasks of the middle-layer table. Most of
    an extracted vector's cost on a large-vocabulary model is its evaluation at each layer (Gemma-3-270M: about
    2.4 s of one CPU thread per layer and method on 200 test queries, against about 30 s for the extraction)."""
    if profile.name == "paper" or task in plan_tasks(profile)["sweep"]:
        return table_layers(n_layers, profile)
    return [n_layers // 2]


def linearity_layers(n_layers: int, profile: Profile, task: str = "antonym") -> list[int]:
    """The injection layers of the linear reconstruction: for each depth ``f`` of the profile's
    ``linearity_fractions`` (``L/4``, ``L/2`` and ``3L/4`` in ``cpu`` and ``paper``), the layer nearest ``f * L``
    among chapter 05's layers for ``task`` in ``profile`` (so its cached fits serve), or among all layers when
    chapter 05 has fewer layers there than there are depths. Ties go to the earlier layer."""
    fractions = across_sizes(profile).linearity_fractions
    plan = linearity_plan(n_layers, profile).get(task, [])
    candidates = sorted(set(plan)) if len(set(plan)) >= len(fractions) else list(range(n_layers))
    chosen: list[int] = []
    for frac in fractions:
        target = frac * n_layers
        free = [l for l in candidates if l not in chosen] or candidates
        chosen.append(min(free, key=lambda l: (abs(l - target), l)))
    return sorted(set(chosen))


def sweep_ltv_layers(n_layers: int, profile: Profile, task: str) -> list[int]:
    """Layers of the LTV layer sweep: every layer in ``paper`` (chapter 01's ``ltv_layers``), else the three
    layers of the linear reconstruction (:func:`linearity_layers`), whose LTVs it trains anyway."""
    if profile.name == "paper":
        return ltv_layers(n_layers, task, profile)
    return linearity_layers(n_layers, profile, task)


# ------------------------------------------------------------------------------------------------------------
# One plan per chapter: what a chapter's first cell asks for, in concrete values


def _frozen(mapping: Mapping[str, Sequence[int]]) -> Mapping[str, tuple[int, ...]]:
    return MappingProxyType({k: tuple(v) for k, v in mapping.items()})


@dataclass(frozen=True)
class OverviewPlan:
    """Chapter 00: ``tasks`` (zero-shot and ICL), ``ltv_tasks`` (middle-layer LTVs, ``seeds`` each), ``icl_shots``."""

    profile: str
    run_sizes: RunSizes
    tasks: tuple[str, ...]
    ltv_tasks: tuple[str, ...]
    icl_shots: tuple[int, ...]
    seeds: tuple[int, ...]


def overview_plan(profile: str, recipe: str | None = None, *, seed: int = 0) -> OverviewPlan:
    """Chapter 00's plan in ``profile`` (with LTV recipe ``recipe``; None = the profile's own)."""
    p = get_profile(profile, recipe=recipe)
    return OverviewPlan(p.name, run_sizes(p), p.tasks, p.ltv_tasks, p.icl_shots, headline_seeds(p, seed))


@dataclass(frozen=True)
class ExtractedPlan:
    """Chapter 01 on a model of ``n_layers`` layers.

    Attributes:
        extraction: the extraction configs and LTV-sweep coverage (:data:`EXTRACTED_SIZES`).
        seeds: training seeds of the middle-layer LTVs (the sweep's other layers train ``seeds[0]``).
        ltv_layers: task -> the layers of its LTVs (:func:`ltv_layers`; the middle layer alone for most tasks).
        sweep_tasks: the tasks with LTVs at several layers; ``sweep_ltv_layers`` the union of their layers.
        layers: the extracted vectors' layers: the sweep layers, the middle layer and every LTV layer (so each layer
            of the LTV sweep has its paired comparison).
        late: the LTV sweep's layers in the last quarter.
    """

    profile: str
    run_sizes: RunSizes
    tasks: tuple[str, ...]
    icl_shots: tuple[int, ...]
    seeds: tuple[int, ...]
    extraction: ExtractedSizes
    ltv_layers: Mapping[str, tuple[int, ...]]
    sweep_tasks: tuple[str, ...]
    sweep_ltv_layers: tuple[int, ...]
    layers: tuple[int, ...]
    late: tuple[int, ...]


def extracted_plan(profile: str, recipe: str | None = None, *, seed: int = 0, n_layers: int) -> ExtractedPlan:
    """Chapter 01's plan in ``profile`` on a model of ``n_layers`` layers."""
    p = get_profile(profile, recipe=recipe)
    at = {t: ltv_layers(n_layers, t, p) for t in p.tasks}
    sweep_tasks = tuple(t for t in p.tasks if len(at[t]) > 1)
    sweep = tuple(sorted({l for t in sweep_tasks for l in at[t]}))
    layers = tuple(sorted(set(table_layers(n_layers, p)) | set(sweep)))
    late = tuple(l for l in sweep if l >= (3 * n_layers) // 4)
    return ExtractedPlan(p.name, run_sizes(p), p.tasks, p.icl_shots, headline_seeds(p, seed),
                         EXTRACTED_SIZES[p.name], _frozen(at), sweep_tasks, sweep, layers, late)


@dataclass(frozen=True)
class FlexibilityPlan:
    """Chapter 02: ``sizes`` (:data:`FLEX_SIZES`), its ``tasks``, the baseline column's ``base_seeds`` (the headline
    LTVs), every other column's ``other_seeds`` and the test queries per task ``n_test`` (None = all)."""

    profile: str
    run_sizes: RunSizes
    sizes: FlexSizes
    tasks: tuple[str, ...]
    base_seeds: tuple[int, ...]
    other_seeds: tuple[int, ...]
    n_test: int | None


def flexibility_plan(
    profile: str, recipe: str | None = None, *, seed: int = 0, tasks: Sequence[str] | None = None
) -> FlexibilityPlan:
    """Chapter 02's plan in ``profile`` (``tasks``: the chapter's parameter; None = the profile's)."""
    p = get_profile(profile, recipe=recipe)
    flex = flex_sizes(p)
    n_test = flex.n_test if flex.n_test is not None else p.n_test
    return FlexibilityPlan(p.name, run_sizes(p), flex, tuple(tasks) if tasks else flex.tasks, headline_seeds(p, seed),
                           tuple(seed + s for s in flex.seeds), n_test)


@dataclass(frozen=True)
class PeftPlan:
    """Chapter 03: the race's ``sizes`` (:func:`compare_sizes`), its ``tasks`` and ``seeds``, and whether prompt
    tuning's default setting races (``prompt_default``)."""

    profile: str
    run_sizes: RunSizes
    sizes: CompareSizes
    tasks: tuple[str, ...]
    seeds: tuple[int, ...]
    prompt_default: bool


PEFT_SEEDS: dict[str, int] = {"smoke": 1, "cpu": 2, "paper": 3}
"""Chapter 03's training seeds per method in each profile (the first also trains the learning-rate grid)."""


def peft_plan(
    profile: str, recipe: str | None = None, *, seed: int = 0, tasks: Sequence[str] | None = None,
    n_seeds: int | None = None, prompt_default: bool | None = None,
) -> PeftPlan:
    """Chapter 03's plan in ``profile``: SST-2 (and TREC in ``paper``) unless ``tasks`` says otherwise; seeds
    ``seed`` ... ``seed + n_seeds - 1`` (None: :data:`PEFT_SEEDS`); prompt tuning's default (the race's costliest
    run) in ``paper`` unless ``prompt_default`` says otherwise."""
    p = get_profile(profile, recipe=recipe)
    n_seeds = PEFT_SEEDS[p.name] if n_seeds is None else n_seeds
    task_list = tuple(tasks) if tasks else (("sst2", "trec") if p.name == "paper" else ("sst2",))
    with_prompt = p.name == "paper" if prompt_default is None else bool(prompt_default)
    return PeftPlan(p.name, run_sizes(p), compare_sizes(p), task_list, tuple(seed + i for i in range(n_seeds)),
                    with_prompt)


OV_KEY_HEADS_SIZES: dict[str, dict[str, Any]] = {
    "smoke": {"label": ("sst2",), "open": ("antonym",), "n_queries": 8, "n_random": 2, "n_draws": 2},
    "cpu": {"label": ("sst2", "trec", "snli"), "open": ("antonym",), "n_queries": 64, "n_random": 3, "n_draws": 5},
    "paper": {"label": ("sst2", "trec", "snli", "rte"), "open": ("antonym", "capitalize", "capital"),
              "n_queries": 100, "n_random": 5, "n_draws": 10},
}
"""Chapter 04 per profile: the label-space tasks (they decide every verdict), the open-vocabulary tasks shown beside
them, the held-out analysis queries (validation split: saliency, mean head outputs, attention statistics, norm
scales), random head sets and random vectors per control. In ``cpu`` RTE is left out: its prompts are the longest
(the analysis runs the whole prompt of every test query once), and three label-space tasks already give 600 test
queries."""


@dataclass(frozen=True)
class OVKeyHeadsPlan:
    """Chapter 04: ``label_tasks`` (deciding), ``open_tasks`` (beside), ``n_queries`` analysis queries per task,
    ``n_random`` random head sets per control, ``n_draws`` random vectors per OV control."""

    profile: str
    run_sizes: RunSizes
    label_tasks: tuple[str, ...]
    open_tasks: tuple[str, ...]
    n_queries: int
    n_random: int
    n_draws: int


def ov_key_heads_plan(
    profile: str, recipe: str | None = None, *, label_tasks: Sequence[str] | None = None,
    open_tasks: Sequence[str] | None = None, n_random: int | None = None, n_draws: int | None = None,
) -> OVKeyHeadsPlan:
    """Chapter 04's plan in ``profile``; the chapter's parameters (None = the profile's) override the table.

    Raises:
        ValueError: a label task without a label space.
    """
    p = get_profile(profile, recipe=recipe)
    sizes = OV_KEY_HEADS_SIZES[p.name]
    labels = tuple(label_tasks or sizes["label"])
    for t in labels:
        if not get_task(t).labels:
            raise ValueError(f"{t!r} has no label space; give it in open_tasks")
    return OVKeyHeadsPlan(p.name, run_sizes(p), labels, tuple(open_tasks or sizes["open"]), sizes["n_queries"],
                          n_random or sizes["n_random"], n_draws or sizes["n_draws"])


LINEARITY_DRAWS: dict[str, int] = {"smoke": 2, "cpu": 3, "paper": 10}
#: LTV seeds per layer of chapter 05's sweep task: the rotation and alignment intervals resample them.
LINEARITY_SEEDS: dict[str, int] = {"smoke": 2, "cpu": 3, "paper": 3}
"""Chapter 05's random vectors per (task, layer) control, per profile."""


@dataclass(frozen=True)
class LinearityPlan:
    """Chapter 05: the fit sizes ``config``, ``layers`` (task -> its layers, :func:`mechanism_plan`; label-space
    tasks first), ``n_draws`` random vectors per control and ``n_seeds`` LTV seeds at each layer of the sweep task
    (the label-space task with the most layers; every other point has one seed)."""

    profile: str
    run_sizes: RunSizes
    config: LinearityConfig
    layers: Mapping[str, tuple[int, ...]]
    n_draws: int
    n_seeds: int = 1

    @property
    def sweep_task(self) -> str | None:
        """The label-space task with the most layers (the first such in plan order), None without one."""
        labelled = [t for t in self.layers if get_task(t).labels]
        return max(labelled, key=lambda t: len(self.layers[t])) if labelled else None

    def seeds(self, task: str, seed: int = 0) -> tuple[int, ...]:
        """The LTV seeds measured for ``task`` at each of its layers, counted from ``seed``."""
        return tuple(seed + i for i in range(self.n_seeds if task == self.sweep_task else 1))


def linearity_chapter_plan(
    profile: str, recipe: str | None = None, *, n_layers: int, n_draws: int | None = None
) -> LinearityPlan:
    """Chapter 05's plan in ``profile`` on a model of ``n_layers`` layers (``n_draws``: None = the profile's)."""
    p = get_profile(profile, recipe=recipe)
    return LinearityPlan(p.name, run_sizes(p), linearity_config(p), _frozen(mechanism_plan(n_layers, p)),
                         n_draws or LINEARITY_DRAWS[p.name], LINEARITY_SEEDS[p.name])


@dataclass(frozen=True)
class GeneralizationPlan:
    """Chapter 06: the generalisation study's ``sizes`` and the composition's ``composition``, seeds shifted by the
    chapter's ``seed``."""

    profile: str
    run_sizes: RunSizes
    sizes: GeneralizationSizes
    composition: CompositionSizes


def generalization_plan(
    profile: str, recipe: str | None = None, *, seed: int = 0, tasks: Sequence[str] | None = None,
    n_seeds: int | None = None,
) -> GeneralizationPlan:
    """Chapter 06's plan in ``profile``: ``tasks`` (None = the profile's) and ``n_seeds`` (None = the profile's
    seed counts; else this many seeds for every task and for the composition) override the tables."""
    p = get_profile(profile, recipe=recipe)
    sizes, csizes = generalization_sizes(p), composition_sizes(p)
    if tasks is not None:
        fewer = tuple((t, s) for t, s in sizes.fewer_seeds if t in tasks)
        sizes = replace(sizes, tasks=tuple(tasks), fewer_seeds=fewer)
    if n_seeds is not None:
        sizes = replace(sizes, seeds=tuple(range(n_seeds)), fewer_seeds=())
        csizes = replace(csizes, seeds=tuple(range(n_seeds)))
    return GeneralizationPlan(p.name, run_sizes(p), sizes.shifted(seed),
                              replace(csizes, seeds=tuple(seed + s for s in csizes.seeds)))


@dataclass(frozen=True)
class MyopicPlan:
    """Chapter 07: the chapter's ``sizes`` (:data:`MYOPIC_SIZES`, its task as the chapter asks)."""

    profile: str
    run_sizes: RunSizes
    sizes: MyopicSizes


def myopic_plan(profile: str, recipe: str | None = None, *, task: str | None = None) -> MyopicPlan:
    """Chapter 07's plan in ``profile`` (``task``: None = the profile's, else ``"myopic"`` or ``"myopic_lm"``)."""
    p = get_profile(profile, recipe=recipe)
    sizes = myopic_sizes(p)
    return MyopicPlan(p.name, run_sizes(p), sizes if task is None else replace(sizes, task=task))


@dataclass(frozen=True)
class AcrossModelsPlan:
    """Chapter 08: ``sizes`` (:data:`ACROSS_MODELS_SIZES`), ``tasks`` (``"table"``, ``"sweep"``, ``"key_heads"``,
    ``"linearity"`` -> task lists, :func:`plan_tasks`), ``icl_shots`` and the linear fit's ``linearity`` sizes;
    the layers of each model come from :meth:`layers`."""

    profile: str
    run_sizes: RunSizes
    sizes: AcrossModelsSizes
    tasks: Mapping[str, tuple[str, ...]]
    icl_shots: tuple[int, ...]
    linearity: LinearityConfig
    _profile: Profile = field(repr=False, compare=False)

    def layers(self, n_layers: int) -> ModelLayers:
        """The layers of a model of ``n_layers`` layers, per task of the plan."""
        p, t = self._profile, self.tasks
        return ModelLayers(
            table=tuple(table_layers(n_layers, p)),
            extracted=_frozen({task: extracted_layers(n_layers, p, task) for task in t["table"]}),
            sweep_ltv=_frozen({task: sweep_ltv_layers(n_layers, p, task) for task in t["sweep"]}),
            linearity=_frozen({task: linearity_layers(n_layers, p, task) for task in t["linearity"]}),
        )


@dataclass(frozen=True)
class ModelLayers:
    """Chapter 08's layers on one model: ``table`` (chapter 01's extracted-vector layers, :func:`table_layers`),
    ``extracted`` (task -> :func:`extracted_layers`), ``sweep_ltv`` (task -> :func:`sweep_ltv_layers`) and
    ``linearity`` (task -> :func:`linearity_layers`)."""

    table: tuple[int, ...]
    extracted: Mapping[str, tuple[int, ...]]
    sweep_ltv: Mapping[str, tuple[int, ...]]
    linearity: Mapping[str, tuple[int, ...]]


def across_models_plan(profile: str, recipe: str | None = None) -> AcrossModelsPlan:
    """Chapter 08's plan in ``profile``."""
    p = get_profile(profile, recipe=recipe)
    tasks = MappingProxyType({k: tuple(v) for k, v in plan_tasks(p).items()})
    return AcrossModelsPlan(p.name, run_sizes(p), across_sizes(p), tasks, p.icl_shots, linearity_config(p), p)


CHAPTER_PLANS = {
    "00_overview": overview_plan, "01_ltv_vs_extracted": extracted_plan, "02_flexibility": flexibility_plan,
    "03_peft": peft_plan, "04_ov_key_heads": ov_key_heads_plan, "05_linearity": linearity_chapter_plan,
    "06_generalization_composition": generalization_plan, "07_myopic": myopic_plan,
    "08_across_models": across_models_plan,
}
"""Chapter name -> its plan function (each takes ``profile`` and ``recipe``; 01 and 05 also ``n_layers``)."""
