"""What each chapter covers in one run: the size dataclasses that :mod:`ltvlib.study.plans` fills in per profile
(:class:`FlexSizes`, :class:`GeneralizationSizes`, :class:`CompositionSizes`, :class:`MyopicSizes`,
:class:`AcrossModelsSizes`).

A leaf module: plain frozen dataclasses that import no study, so the plans can build every chapter's sizes while a
chapter's code closure (its cache key and stamp) holds only the study modules the chapter runs: editing one study
re-executes only the chapters that import it. Each class is re-exported by its study module
(:mod:`ltvlib.study.flexibility`, :mod:`ltvlib.study.generalization`, ...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..tasks import get_task

__all__ = ["AcrossModelsSizes", "CompositionSizes", "FlexSizes", "GeneralizationSizes", "MyopicSizes"]


@dataclass(frozen=True)
class FlexSizes:
    """What the flexibility chapter covers in one run (a table of :mod:`ltvlib.study.plans`).

    Attributes:
        tasks: the tasks of the baseline column and of every column :attr:`setting_tasks` does not restrict.
        icl_shots: demonstrations of the ICL setting (the paper's 8; fewer in ``smoke``, where only the code
            path matters).
        n_late: late layers of the "no critical depth" comparison (None = every layer of the last quarter,
            0 = none).
        layer_steps: the multi-layer settings (:func:`table1_settings`): 4 is the paper's column, 2 its text.
        seeds: training seeds of the LTVs of every setting but the baseline, offset by the chapter's ``seed``
            (the baseline column's are the run's headline seeds, :func:`ltvlib.study.plans.headline_seeds`:
            the middle-layer vectors chapters 00 and 01 train, read back from the shared cache).
        n_test: test queries per task, zero-shot and k-shot alike (the same queries, so every column pairs
            with the baseline); None = the run's ``n_test``.
        setting_tasks: setting name -> the tasks that setting runs on, a subset of ``tasks`` (a column's
            comparison with the baseline is then made over the same subset); settings not named run on
            ``tasks``. The baseline cannot be restricted: every column is compared with it.
        why_fewer: why a column leaves out some of the paper's seven tasks in this profile (the chapter's
            verdict then has a part "not measured at this budget" with this reason).
    """

    tasks: tuple[str, ...]
    icl_shots: int = 8
    n_late: int | None = 3
    layer_steps: tuple[int, ...] = (4, 2)
    seeds: tuple[int, ...] = (0,)
    n_test: int | None = None
    setting_tasks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    why_fewer: str = ""

    def __post_init__(self) -> None:
        if not self.tasks or not self.seeds or not self.layer_steps:
            raise ValueError(f"FlexSizes needs tasks, seeds and a layer step, got {self}")
        if self.n_late is not None and self.n_late < 0:
            raise ValueError(f"n_late must be None or >= 0, got {self.n_late}")
        if "baseline" in self.setting_tasks:
            raise ValueError("setting_tasks: the baseline runs on every task (each column is compared with it)")
        for name, sub in self.setting_tasks.items():
            extra = [t for t in sub if t not in self.tasks]
            if not sub or extra:
                raise ValueError(f"setting_tasks[{name!r}] must be a non-empty subset of {self.tasks}, got {sub}")

    def tasks_of(self, setting: str, within: Sequence[str] | None = None) -> tuple[str, ...]:
        """The tasks ``setting`` (a :class:`Setting`'s name) runs on, in the order of ``within`` (default
        :attr:`tasks`), restricted to :attr:`setting_tasks` where that names the setting."""
        pool = tuple(self.tasks if within is None else within)
        sub = self.setting_tasks.get(setting)
        return pool if sub is None else tuple(t for t in pool if t in sub)


@dataclass(frozen=True)
class GeneralizationSizes:
    """What the generalisation study covers in one run (a table of :mod:`ltvlib.study.plans`).

    Attributes:
        tasks: tasks whose LTVs are compared and crossed (rows and columns of the transfer matrix).
        seeds: LTV seeds of every task (seed 0 is chapter 0's vector) ...
        fewer_seeds: ... except these ``(task, seeds)`` pairs (tasks whose vectors cost most to train).
        transfer_seeds: source seeds crossed with every target task (each must be trained for every task).
        control_draws: random vectors of the SNLI LTV's norm run on RTE's prompts (the transfer's control).
    """

    tasks: tuple[str, ...]
    seeds: tuple[int, ...]
    fewer_seeds: tuple[tuple[str, tuple[int, ...]], ...] = ()
    transfer_seeds: tuple[int, ...] = (0,)
    control_draws: int = 5

    def __post_init__(self) -> None:
        for name in (*self.tasks, *(t for t, _ in self.fewer_seeds)):
            get_task(name)  # fails naming the allowed tasks
        if not self.seeds or not all(s for _, s in self.fewer_seeds):
            raise ValueError("every task needs at least one seed")
        for t in self.tasks:
            missing = set(self.transfer_seeds) - set(self.seeds_of(t))
            if missing:
                raise ValueError(f"transfer seeds {sorted(missing)} are not trained for task {t!r}")

    def seeds_of(self, task: str) -> tuple[int, ...]:
        """The seeds whose LTVs are trained for ``task``."""
        return dict(self.fewer_seeds).get(task, self.seeds)

    def shifted(self, offset: int) -> GeneralizationSizes:
        """Every seed plus ``offset`` (a run with ``seed=offset`` starts its seeds there)."""
        return replace(
            self, seeds=tuple(s + offset for s in self.seeds),
            fewer_seeds=tuple((t, tuple(s + offset for s in ss)) for t, ss in self.fewer_seeds),
            transfer_seeds=tuple(s + offset for s in self.transfer_seeds),
        )


@dataclass(frozen=True)
class CompositionSizes:
    """What the composition experiment covers in one run (a table of :mod:`ltvlib.study.plans`).

    Attributes:
        seeds: seeds of the three LTVs (vectors of one seed are combined; ICL draws its demonstrations with it).
        scales: the grid of ``a`` (English->French) and ``b`` (masculine->feminine) in ``a * v1 + b * v2``.
        icl_shots: demonstration counts of the ICL references (composed demonstrations).
        test_pairs: composed test pairs (one query each); the other pairs give validation (20) and training.
    """

    seeds: tuple[int, ...]
    scales: tuple[float, ...]
    icl_shots: tuple[int, ...]
    test_pairs: int = 100


@dataclass(frozen=True)
class MyopicSizes:
    """What the chapter measures in one run (a table of :mod:`ltvlib.study.plans`).

    Attributes:
        task: ``"myopic"`` (human-written items, the file CAA uses) or ``"myopic_lm"`` (model-written).
        n_test: letter-balanced held-out items (even; None = the largest balanced set, 246 for ``myopic``).
        icl_shots: demonstration counts of the ICL references.
        ltv_n_train, ltv_n_val: training and early-stopping questions of the LTVs (None = ``run_sizes``'
            ``n_train`` / ``n_val``; the split holds at most 500 / 250).
        extract_shots: demonstrations per prompt of both extracted vectors (None = their configs' own: 5 for
            the Vanilla TV, 10 for the FV).
        n_generations: held-out questions shown as free generations.
        max_new_tokens: greedy tokens per free generation.
        judge_items: held-out items (the first of the balanced set, even; None = all ``n_test``) whose greedy
            answer to the option-text prompt is judged against the options (:func:`behaviour_scores`).
        judge_new_tokens: greedy tokens per judged answer (an option is about 5 to 15 tokens).
        judge_methods: the methods whose greedy answers are generated and judged (None = all); generation
            reruns every prompt in full, so on a CPU it is the costliest measurement per vector.
        random_draws: random vectors of the LTV's norm per direction and LTV seed (the control, method
            ``"random"``; 0 = none).
        ltv_patience: epochs without a better validation score before the LTVs stop (None = the recipe's;
            the recipe's number of epochs = run every epoch of its schedule and keep the best).
    """

    task: str = "myopic"
    n_test: int | None = None
    icl_shots: tuple[int, ...] = (5, 10)
    ltv_n_train: int | None = None
    ltv_n_val: int | None = None
    extract_shots: int | None = None
    n_generations: int = 6
    max_new_tokens: int = 40
    judge_items: int | None = None
    judge_new_tokens: int = 24
    judge_methods: tuple[str, ...] | None = None
    random_draws: int = 3
    ltv_patience: int | None = None


@dataclass(frozen=True)
class AcrossModelsSizes:
    """What chapter 08 covers in one run (a table of :mod:`ltvlib.study.plans`).

    Attributes:
        tasks: tasks of the middle-layer table (None = all of the run's tasks).
        sweep_tasks: tasks whose LTV is trained at several layers (:func:`ltvlib.study.plans.sweep_ltv_layers`);
            None = every table task.
        key_head_tasks: tasks of the key-head ablation (None = every table task).
        n_key_queries: validation queries for saliency, mean head outputs and attention (chapter 04's).
        n_random: random head sets drawn for the control.
        linearity_tasks: tasks of the linear reconstruction (None = every table task).
        linearity_fractions: depths (fractions of ``L``) whose nearest candidate layers the reconstruction
            uses (:func:`ltvlib.study.plans.linearity_layers`); the LTV layer sweep uses the same layers outside
            ``paper``.
        n_check: SST-2 prompts of :func:`check_code_paths` (about 6 s of one CPU thread per 3 prompts).
    """

    tasks: tuple[str, ...] | None
    sweep_tasks: tuple[str, ...] | None
    key_head_tasks: tuple[str, ...] | None
    n_key_queries: int
    n_random: int
    linearity_tasks: tuple[str, ...] | None
    linearity_fractions: tuple[float, ...] = (0.25, 0.5, 0.75)
    n_check: int = 6
