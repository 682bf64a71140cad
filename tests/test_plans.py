"""ltvlib.study.plans: the profiles and their recipes, every chapter's plan in concrete values, one error for an
unknown profile, the per-profile tables and layer choices, and no profile handling anywhere else in the library."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import pytest

import ltvlib
from ltvlib.analysis import peft_compare as pc
from ltvlib.ltv import FAST_RECIPE, PAPER_RECIPE
from ltvlib.study import plans
from ltvlib.study.ltvs import RunSizes
from ltvlib.study.plans import (
    CHAPTER_PLANS,
    PROFILES,
    across_models_plan,
    across_sizes,
    compare_sizes,
    extracted_layers,
    flexibility_plan,
    get_profile,
    headline_seeds,
    linearity_layers,
    linearity_plan,
    ltv_layers,
    mechanism_plan,
    plan_tasks,
    run_sizes,
    sweep_layers,
    sweep_ltv_layers,
    table_layers,
)
from ltvlib.tasks import PAPER_TASKS, get_task

LAYERS = {"01_ltv_vs_extracted": 30, "05_linearity": 30}  # the chapters whose plan depends on the model's depth


def chapter_plan(chapter: str, profile: str, recipe: str | None = None):
    kwargs = {"n_layers": LAYERS[chapter]} if chapter in LAYERS else {}
    return CHAPTER_PLANS[chapter](profile, recipe=recipe, **kwargs)


# ------------------------------------------------------------------------------------------------ profiles


def test_each_profile_has_its_recipe():
    assert get_profile("paper").recipe == PAPER_RECIPE
    assert get_profile("cpu").recipe == FAST_RECIPE
    smoke = get_profile("smoke").recipe
    assert smoke.relative_to_stream and (smoke.epochs, smoke.samples_per_epoch) == (1, 32)


def test_any_profile_takes_either_recipe():
    assert get_profile("cpu", recipe="paper").recipe == PAPER_RECIPE
    assert get_profile("smoke", recipe="paper").recipe == PAPER_RECIPE
    fast_at_paper_sizes = get_profile("paper", recipe="fast")
    assert fast_at_paper_sizes.recipe.recipe == "fast" and fast_at_paper_sizes.recipe.val_queries is None
    assert fast_at_paper_sizes.n_val == PROFILES["paper"].n_val and fast_at_paper_sizes.n_test is None
    # the profile's own recipe asked for by name: the same profile object (same cache entries)
    assert get_profile("cpu", recipe="fast") is get_profile("cpu") is PROFILES["cpu"]
    assert get_profile("paper", recipe="paper") is PROFILES["paper"]
    assert get_profile("smoke", recipe="fast") is PROFILES["smoke"]


@pytest.mark.parametrize(("args", "match"), [(("gpu",), "unknown profile 'gpu'; allowed: smoke, cpu, paper"),
                                             (("cpu", "slow"), "unknown recipe 'slow'; allowed: paper, fast")])
def test_unknown_names_are_named(args, match):
    with pytest.raises(ValueError, match=match):
        get_profile(*args)


def test_headline_seeds_per_profile():
    assert headline_seeds(get_profile("cpu")) == (0, 1, 2)
    assert headline_seeds(get_profile("cpu"), seed=5) == (5, 6, 7)
    assert headline_seeds(get_profile("paper")) == (0, 1, 2)
    assert len(headline_seeds(get_profile("smoke"))) == 2
    # another recipe keeps the profile's seeds
    assert get_profile("cpu", recipe="paper").headline_seeds == (0, 1, 2)


def test_run_sizes_are_the_profiles_sizes_and_extraction_configs():
    for name, prof in PROFILES.items():
        run = run_sizes(prof)
        assert isinstance(run, RunSizes)
        assert (run.n_train, run.n_val, run.n_test, run.n_test_icl, run.icl_demo_sets, run.recipe,
                run.n_sweep_layers) == (prof.n_train, prof.n_val, prof.n_test, prof.n_test_icl, prof.icl_demo_sets,
                                        prof.recipe, prof.n_sweep_layers)
        assert run.vanilla_tv == plans.EXTRACTED_SIZES[name].vanilla_tv
        assert run.function_vector == plans.EXTRACTED_SIZES[name].function_vector
    assert run_sizes(get_profile("cpu")).function_vector.n_mean == 20  # fewer FV prompts than the paper's


def test_every_table_has_an_entry_for_every_profile():
    tables = [plans.EXTRACTED_SIZES, plans.LINEARITY_SIZES, plans.FLEX_SIZES, plans.GENERALIZATION_SIZES,
              plans.COMPOSITION_SIZES, plans.MYOPIC_SIZES, plans.ACROSS_MODELS_SIZES, plans.OV_KEY_HEADS_SIZES,
              plans.LINEARITY_DRAWS]
    for table in tables:
        assert set(table) == set(PROFILES)


# ------------------------------------------------------------------------------------------- chapter plans


@pytest.mark.parametrize("profile", ["smoke", "cpu", "paper"])
@pytest.mark.parametrize("chapter", list(CHAPTER_PLANS))
def test_every_chapters_plan_builds_in_every_profile(chapter, profile):
    plan = chapter_plan(chapter, profile)
    assert plan.profile == profile
    assert plan.run_sizes == run_sizes(get_profile(profile))
    hash(plan.run_sizes)  # frozen: a plan cannot be changed after the chapter's first cell


@pytest.mark.parametrize("chapter", list(CHAPTER_PLANS))
def test_an_unknown_profile_raises_one_error_naming_the_allowed_ones(chapter):
    with pytest.raises(ValueError, match=r"^unknown profile 'gpu'; allowed: smoke, cpu, paper$"):
        chapter_plan(chapter, "gpu")


@pytest.mark.parametrize("chapter", list(CHAPTER_PLANS))
def test_a_recipe_override_reaches_the_train_config(chapter):
    assert chapter_plan(chapter, "cpu").run_sizes.recipe == FAST_RECIPE
    assert chapter_plan(chapter, "cpu", recipe="paper").run_sizes.recipe == PAPER_RECIPE
    assert chapter_plan(chapter, "paper", recipe="fast").run_sizes.recipe.recipe == "fast"


def test_the_race_schedule_follows_the_recipe_override():
    assert plans.peft_plan("cpu").sizes.schedule.recipe == "fast"
    assert plans.peft_plan("cpu", recipe="paper").sizes.schedule == PAPER_RECIPE


def test_the_cpu_plan_of_chapter_02_covers_the_seven_tasks_with_100_test_queries():
    plan = flexibility_plan("cpu")
    assert plan.tasks == PAPER_TASKS and len(plan.tasks) == 7
    assert plan.n_test == 100 and plan.base_seeds == (0, 1, 2) and plan.other_seeds == (0,)
    assert flexibility_plan("cpu", seed=4).base_seeds == (4, 5, 6)
    assert flexibility_plan("cpu", tasks=["trec"]).tasks == ("trec",)
    assert flexibility_plan("smoke").n_test == get_profile("smoke").n_test  # no own n_test: the profile's


def test_chapter_01s_plan_on_a_30_layer_model():
    plan = plans.extracted_plan("cpu", n_layers=30)
    assert plan.sweep_tasks == ("capital", "capitalize", "antonym", "trec")
    assert plan.sweep_ltv_layers == (0, 6, 12, 15, 17, 23, 29) and plan.late == (23, 29)
    assert plan.ltv_layers["sst2"] == (15,)
    assert set(table_layers(30, get_profile("cpu"))) | set(plan.sweep_ltv_layers) == set(plan.layers)
    assert plan.seeds == (0, 1, 2) and plan.extraction is plans.EXTRACTED_SIZES["cpu"]


def test_chapter_plans_take_their_parameters():
    ov = plans.ov_key_heads_plan("cpu")
    assert (ov.label_tasks, ov.open_tasks, ov.n_queries, ov.n_random, ov.n_draws) == (
        ("sst2", "trec", "snli"), ("antonym",), 64, 3, 5)
    ov = plans.ov_key_heads_plan("cpu", label_tasks=["rte"], n_random=7)
    assert ov.label_tasks == ("rte",) and ov.n_random == 7 and ov.n_draws == 5
    with pytest.raises(ValueError, match="no label space"):
        plans.ov_key_heads_plan("cpu", label_tasks=["antonym"])
    peft = plans.peft_plan("paper", seed=2, n_seeds=2)
    assert peft.tasks == ("sst2", "trec") and peft.seeds == (2, 3) and peft.prompt_default
    assert plans.peft_plan("cpu").tasks == ("sst2",) and not plans.peft_plan("cpu").prompt_default
    lin = plans.linearity_chapter_plan("cpu", n_layers=30)
    assert list(lin.layers) == ["trec", "sst2", "antonym"] and lin.n_draws == 3 and lin.config.n_queries == 32
    assert plans.linearity_chapter_plan("cpu", n_layers=30, n_draws=9).n_draws == 9
    gen = plans.generalization_plan("cpu", seed=1)
    assert gen.sizes.seeds == (1, 2) and gen.composition.seeds == (1, 2, 3)
    gen = plans.generalization_plan("cpu", tasks=["snli", "antonym"], n_seeds=1)
    assert gen.sizes.tasks == ("snli", "antonym") and gen.sizes.seeds_of("snli") == (0,)
    assert plans.myopic_plan("cpu").sizes.n_test == 100
    assert plans.myopic_plan("cpu", task="myopic_lm").sizes.task == "myopic_lm"
    across = across_models_plan("cpu")
    assert across.tasks["table"] == ("antonym", "sst2", "trec") and across.icl_shots == (5, 10)
    at = across.layers(30)
    assert at.table == tuple(table_layers(30, get_profile("cpu"))) and at.extracted["trec"] == (15,)
    assert at.sweep_ltv["antonym"] == (8, 15, 24) and len(at.linearity["trec"]) == 3


# ------------------------------------------------------------------------------------ tables and layers


def test_ltv_layers_per_profile(llama):
    assert ltv_layers(30, "antonym", get_profile("cpu")) == [0, 6, 12, 15, 17, 23, 29]
    assert ltv_layers(30, "sst2", get_profile("cpu")) == [15]
    assert ltv_layers(30, "sst2", get_profile("paper")) == list(range(30))
    assert ltv_layers(30, "antonym", get_profile("smoke")) == [0, 15, 29]
    assert ltv_layers(llama.n_layers, "antonym", get_profile("smoke")) == [0, 1, 2]


def test_mechanism_plan_puts_label_space_tasks_first_and_sweeps_one():
    cpu = mechanism_plan(30, get_profile("cpu"))
    assert list(cpu) == ["trec", "sst2", "antonym"] and cpu["sst2"] == cpu["antonym"] == [15]
    # chapter 01's cached TREC vectors after layer 0, the last layer included, enough for a slope and two early layers
    assert set(cpu["trec"]) <= set(ltv_layers(30, "trec", get_profile("cpu")))
    assert 3 <= len(cpu["trec"]) <= 7 and 15 in cpu["trec"] and 29 in cpu["trec"] and min(cpu["trec"]) > 0
    assert len([l for l in cpu["trec"] if l < 15]) >= 2
    smoke = mechanism_plan(30, get_profile("smoke"))
    assert smoke == {"sst2": [8, 15, 22], "antonym": [15]}
    paper = mechanism_plan(30, get_profile("paper"))
    labelled = [t for t in paper if get_task(t).labels]
    assert list(paper)[: len(labelled)] == labelled and all(v == list(range(30)) for v in paper.values())


def test_race_sizes_follow_the_profile_and_its_recipe():
    cpu = compare_sizes(get_profile("cpu"))
    assert cpu.n_test >= 200 and not cpu.schedule.relative_to_stream
    assert cpu.schedule.lr == pytest.approx(0.9 / 6.15 * 29.0)  # the fast recipe's step at SmolLM2's middle layer
    # the cap and rule chapter 00's LTVs train under: 8 epochs of 128 samples, stop after 2 validations without a gain
    rule = cpu.stopping_rule()
    assert (rule.val_every, rule.patience, rule.after_gain) == (128, 2, True)
    assert cpu.schedule.epochs * cpu.schedule.samples_per_epoch == 1024 and cpu.schedule.batch_size == 16
    assert rule == pc.StoppingRule.from_config(FAST_RECIPE)
    assert [len(plans.peft_plan(p).seeds) for p in ("smoke", "cpu", "paper")] == [1, 2, 3]
    paper = compare_sizes(get_profile("paper"))
    assert paper.stopping_rule() == pc.StoppingRule.from_config(paper.schedule)
    paper_recipe = compare_sizes(get_profile("cpu", recipe="paper"))
    assert paper_recipe.schedule == PAPER_RECIPE and paper_recipe.n_test == cpu.n_test
    smoke = compare_sizes(get_profile("smoke", recipe="paper"))
    assert smoke.schedule.recipe == "paper" and smoke.schedule.batch_size == 1 and smoke.schedule.lr == PAPER_RECIPE.lr
    assert (compare_sizes(get_profile("smoke")).n_train, compare_sizes(get_profile("smoke")).n_test) == (16, 4)


def test_chapter_08_plan_per_profile():
    cpu = get_profile("cpu")
    plan = plan_tasks(cpu)
    assert plan["table"] == ["antonym", "sst2", "trec"]
    # the mechanism claims are decided on label-space tasks, as chapters 04 and 05 decide them
    assert plan["key_heads"] == ["sst2", "trec"] and plan["linearity"] == ["trec"]
    assert all(get_task(t).labels for t in (*plan["key_heads"], *plan["linearity"]))
    smoke = plan_tasks(get_profile("smoke"))
    assert all(get_task(t).labels for t in (*smoke["key_heads"], *smoke["linearity"]))
    for part in ("sweep", "key_heads", "linearity"):
        assert set(plan[part]) <= set(plan["table"])
    assert plan["sweep"] == ["antonym"]
    assert "unscaled" not in plan  # one recipe for every model: no second, unscaled LTV
    paper = plan_tasks(get_profile("paper"))
    assert all(paper[part] == list(PAPER_TASKS) for part in paper)
    assert across_sizes(get_profile("paper")).n_key_queries == 100


def test_table_layers_are_chapter_01s():
    cpu = get_profile("cpu")
    assert table_layers(30, cpu) == sorted(set(sweep_layers(30, cpu)) | {15})
    assert table_layers(18, cpu) == [0, 2, 4, 6, 8, 9, 11, 13, 15, 17]
    assert table_layers(18, get_profile("paper")) == list(range(18))
    # extracted vectors at every table layer for the sweep task, at the middle layer for the others
    assert extracted_layers(18, cpu, "antonym") == table_layers(18, cpu)
    assert extracted_layers(18, cpu, "trec") == [9]
    assert extracted_layers(18, get_profile("paper"), "trec") == list(range(18))


def test_linearity_layers_near_quarter_half_three_quarters():
    cpu = get_profile("cpu")
    # chapter 05's Antonym layers on SmolLM2 are 0, 4, 8, 10, 15, 19, 24, 29: the fits are reused
    assert linearity_layers(30, cpu) == [8, 15, 24]
    assert set(linearity_layers(30, cpu)) <= set(linearity_plan(30, cpu)["antonym"])
    assert linearity_layers(18, cpu) == [4, 9, 14]
    # smoke: the middle and last layers, chapter 05's smoke layers
    assert linearity_layers(30, get_profile("smoke")) == [15, 29] == linearity_plan(30, get_profile("smoke"))["antonym"]
    assert linearity_layers(3, get_profile("smoke")) == [1, 2]
    # chapter 05 has fewer layers there than the depths asked for: any layer, ties to the earlier one
    assert linearity_layers(30, cpu, "capital") == [7, 15, 22]
    assert linearity_layers(3, cpu, "capital") == [0, 1, 2]
    assert linearity_layers(18, get_profile("paper"), "trec") == [4, 9, 13]
    assert sweep_ltv_layers(18, cpu, "antonym") == [4, 9, 14]
    assert sweep_ltv_layers(18, get_profile("paper"), "trec") == list(range(18))


# ------------------------------------------------------------------ nothing else reads a profile

PACKAGE = Path(ltvlib.__file__).parent
# and ltvlib/book/: the runner passes the chapters' parameters, the scorecard records them. study/cost.py prices a
# whole book at a profile: it reads each chapter's plan from plans.py and decides no size of its own.
ALLOWED = {"study/plans.py", "study/cost.py", "study/plan_command.py"}  # the plan and its command line


def profile_names(source: str) -> list[str]:
    """The code names (not strings, not comments) of ``source`` that mention a profile, e.g. ``profile``,
    ``Profile``, ``get_profile``, ``PROFILES``, ``profile_ltv``."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [t.string for t in tokens if t.type == tokenize.NAME and "profile" in t.string.lower()]


def test_the_scan_finds_profile_handling_in_code_and_not_in_prose():
    assert profile_names("def f(lm, profile):\n    return profile.n_test\n") == ["profile", "profile"]
    assert profile_names("from .plans import get_profile\nx = PROFILES['cpu']\n") == ["get_profile", "PROFILES"]
    assert profile_names('"""The chapter\'s profile parameter."""\n# a profile\nx = "profile"\n') == []


def test_no_module_but_plans_and_the_book_reads_a_profile():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in ALLOWED or rel.startswith("book/"):
            continue
        names = profile_names(path.read_text(encoding="utf-8"))
        if names:
            offenders[rel] = sorted(set(names))
    assert offenders == {}
    assert profile_names((PACKAGE / "study/plans.py").read_text(encoding="utf-8"))  # the scan does see plans' code


def test_the_book_runner_offers_exactly_the_profiles_plans_knows():
    from ltvlib.book import runner

    assert tuple(runner.PROFILES) == tuple(PROFILES) and runner.DEFAULT_PROFILE in PROFILES
