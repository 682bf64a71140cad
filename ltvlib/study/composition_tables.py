"""Chapter 06's composition tables, statistics and figures, from :mod:`ltvlib.study.composition`'s results.

:class:`CompositionView` holds the per-seed results (:func:`~ltvlib.study.composition.composition_result`) and which
seeds count for which method (a method built from LTVs counts only the seeds whose vectors trained); its methods
give each method's per-seed correctness, intervals, the table and the figures. The measuring module is untouched
(its source keys the cached measurements).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..stats import Estimate, format_estimate, seed_interval
from .composition import COMPONENTS, COMPOSED, FORMS, TASKS

SCORES: tuple[str, ...] = ("correct", "french_fem")
"""The per-query scores: first-token accuracy and 'the French feminine is the most probable form'."""

DECIDING: str = "french_fem"
"""The score the composition claim is decided on: of the pair's four forms (French feminine, French masculine,
English feminine, the English masculine query), the whole French feminine answer is the most probable. The first
token alone cannot tell *fils* from *fille*."""

GRID_PANELS: tuple[tuple[str, str], ...] = (("accuracy", "first-token accuracy (%)"),
                                             ("fem", "French feminine chosen (%)"))
"""The scaled-sum figure's panels, top to bottom: the column of :meth:`CompositionView.grid` and its name."""

SUM_METHODS: tuple[str, ...] = ("EN->FR", "M->F", "EN->FR + M->F", "random (norm of the sum)")
"""The methods built from the component LTVs (they count the seeds where both trained)."""


def data_table(data: Any) -> pd.DataFrame:
    """Per composition task (index): training, validation, dropped (test words) and test examples."""
    return pd.DataFrame([{
        "task": t, "train": len(data.splits[t].train), "validation": len(data.splits[t].validation),
        "dropped (test words)": len(data.dropped[t]), "test": len(data.splits[t].test),
    } for t in TASKS]).set_index("task")


def rows_of(name: str) -> str:
    """What a method's rows are: the LTVs' training seeds; for ICL and the random control, draws (each seed draws
    its own demonstrations or random vector), which are not training seeds (:data:`ltvlib.stats.ROW_KINDS`)."""
    if name.endswith("ICL") or name.startswith("random"):
        return "draws"
    return "auto" if name == "zero-shot" else "seeds"


@dataclass
class CompositionView:
    """The composition results per seed and the seeds each method counts.

    ``sum_seeds``: results whose two component LTVs trained; ``own_seeds``: results whose composed-task LTV trained;
    ``methods``: the method names in order; ``uses``: method -> the results it counts (others count all; zero-shot
    the first); ``ests``: method -> score -> Estimate (None without a seed)."""

    results: list[dict[str, Any]]
    sum_seeds: list[dict[str, Any]]
    own_seeds: list[dict[str, Any]]
    methods: list[str] = field(init=False)
    uses: dict[str, list[dict[str, Any]]] = field(init=False)
    ests: dict[str, dict[str, Estimate | None]] = field(init=False)

    def __post_init__(self) -> None:
        self.methods = list(self.results[0]["methods"])
        self.uses = {**{m: self.sum_seeds for m in SUM_METHODS}, "composed LTV": self.own_seeds,
                     "zero-shot": self.results[:1]}
        self.ests = {name: {score: (seed_interval(m, rows=rows_of(name)) if (m := self.matrix(name, score)) is not None
                                    else None) for score in SCORES} for name in self.methods}

    @classmethod
    def from_ledger(cls, results: list[dict[str, Any]], comp_ltvs: Mapping[tuple[str, int], Any],
                    ledger: Any) -> CompositionView:
        """The view whose seeds are gated by the LTVs' training (each noted in ``ledger``, where
        ``ch06-composition``: per result the components, then per result the composed LTV)."""
        sum_seeds = [r for r in results if all(ledger.keep([comp_ltvs[(t, r["seed"])]], where="ch06-composition")
                                               for t in COMPONENTS)]
        own_seeds = [r for r in results if ledger.keep([comp_ltvs[(COMPOSED, r["seed"])]], where="ch06-composition")]
        return cls(results, sum_seeds, own_seeds)

    def matrix(self, name: str, score: str = "correct") -> np.ndarray | None:
        """Per-query ``score`` of method ``name``, ``(counted seeds, queries)``; None if it counts no seed."""
        recs = self.uses.get(name, self.results)
        return np.array([r["methods"][name][score] for r in recs]) if recs else None

    def table(self) -> pd.DataFrame:
        """Per method (index): the seeds counted, first-token accuracy and French-feminine share (with intervals, or
        ``"did not train"``), and the share choosing each other form (%)."""
        comp_rows = []
        for name in self.methods:
            recs = self.uses.get(name, self.results)
            row = {"method": name, "seeds": len(recs)}
            for score, col in (("correct", "first-token accuracy"),
                               ("french_fem", "French feminine the most probable form")):
                e = self.ests[name][score]
                row[col] = format_estimate(e, bounds=True) if e is not None else "did not train"
            for f in FORMS[1:]:
                row[f"chooses {f.replace('_', ' ')} (%)"] = (
                    round(100 * float(np.mean([r["methods"][name]["form_choice"][f] for r in recs])), 1)
                    if recs else None)
            comp_rows.append(row)
        return pd.DataFrame(comp_rows).set_index("method")

    def plot(self) -> tuple[plt.Figure, Any]:
        """Each method's first-token accuracy and French-feminine share with intervals (methods without a number
        left out). Returns the figure and its axes, without title or axis labels."""
        ests = self.ests
        fig, ax = plt.subplots(figsize=(8, 4.8), layout="constrained")
        shown = [n for n in self.methods if ests[n]["correct"] is not None]
        x = np.arange(len(shown))
        for j, (score, label, color) in enumerate((("correct", "first-token accuracy", "C0"),
                                                   ("french_fem", "French feminine is the most probable form", "C1"))):
            # a method with a first-token number has both scores (both come from the same seeds)
            es = cast("list[Estimate]", [ests[n][score] for n in shown])
            v = [100 * e.value for e in es]
            err = [[100 * (e.value - e.low) for e in es],
                   [100 * (e.high - e.value) for e in es]]
            ax.bar(x + (j - 0.5) * 0.4, v, 0.4, yerr=err, capsize=3, color=color, label=label)
        ax.set_xticks(x, shown, rotation=30, ha="right")
        ax.set_ylim(0, 100)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.42), ncol=2)
        return fig, ax

    def grid(self) -> pd.DataFrame:
        """The scaled sums over the counted seeds: columns ``a``, ``b``, ``accuracy`` and ``fem`` (%), one row per seed
        and (a, b)."""
        return pd.DataFrame([{"a": g["a"], "b": g["b"], "accuracy": 100 * g["accuracy"],
                              "fem": 100 * g["form_choice"]["french_fem"]} for r in self.sum_seeds for g in r["grid"]])

    def plot_grid(self) -> tuple[plt.Figure, np.ndarray]:
        """The scaled sums' accuracy (top) and French-feminine share (bottom; :data:`GRID_PANELS`) as annotated a × b
        heatmaps with colour bars, mean over the counted seeds. Returns the figure and its two axes, without titles or
        axis labels."""
        grid = self.grid()
        fig, axes = plt.subplots(2, 1, figsize=(7.5, 9))
        for ax, (col, _) in zip(axes, GRID_PANELS):
            g = grid.pivot_table(index="a", columns="b", values=col, aggfunc="mean") if len(grid) else pd.DataFrame()
            if len(g):
                im = ax.imshow(g.values, cmap="viridis", vmin=0, vmax=100, origin="lower", aspect="auto")
                for i in range(g.shape[0]):
                    for j in range(g.shape[1]):
                        ax.text(j, i, f"{g.values[i, j]:.0f}", ha="center", va="center", fontsize=9,
                                color="w" if g.values[i, j] < 60 else "k")
                ax.set_xticks(range(g.shape[1]), [f"{b:g}" for b in g.columns])
                ax.set_yticks(range(g.shape[0]), [f"{a:g}" for a in g.index])
                fig.colorbar(im, ax=ax, label="% of test pairs")
        return fig, axes

    def cosine_table(self) -> pd.DataFrame:
        """Per (kind, seed) row (kind: ``vectors``, ``vector minus start``): the recorded cosines, three decimals."""
        return pd.DataFrame({(kind, f"seed {r['seed']}"): r["cosine"][kind]
                             for kind in ("vectors", "vector minus start") for r in self.sum_seeds}).T.round(3)
