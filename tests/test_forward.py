"""The cached-prefix path gives the full forward's logits and gradients, under padding and shared demos."""

from __future__ import annotations

import pytest
import torch

from ltvlib.forward import DEFAULT_BATCH_TOKENS, PREFILL_BATCH_TOKENS, PositionTail, PromptRunner, tail_needed
from ltvlib.inject import VectorEdit
from ltvlib.ltv import answer_loss
from ltvlib.prompts import EncodedPrompts, answer_ids, encode_prompts
from ltvlib.tasks import get_task, load_splits


def _setup(lm, shared: bool):
    task = get_task("antonym")
    splits = load_splits(task)
    queries = list(splits.train[:6])
    demos = list(splits.train[10:13]) if shared else None
    prompts = encode_prompts(lm.tokenizer, task, queries, shared_demos=demos)
    answers = answer_ids(lm.tokenizer, task, [e.output for e in queries])
    return prompts, answers


def _varied(lm):
    """Six zero- to two-shot prompts (per-row demonstrations): rows of different lengths, so left padding."""
    task = get_task("antonym")
    train = list(load_splits(task).train)
    queries = train[:6]
    demos = [train[10 + 2 * i : 10 + 2 * i + i % 3] for i in range(6)]
    return encode_prompts(lm.tokenizer, task, queries, demos=demos)


def test_tail_needed():
    assert tail_needed([-1]) == 1
    assert tail_needed([-5, -1, -3]) == 5
    assert tail_needed([4, -1]) == PositionTail((4, -1))
    assert tail_needed([]) is None


def test_position_tail_per_row_is_the_distance_from_each_prompts_end(tiny):
    prompts = _varied(tiny)
    s = len(prompts.shared)  # Gemma's BOS is a shared token: position 4 counts it
    tails = PositionTail((4,)).per_row(prompts)
    assert tails == tuple(s + len(r) - 4 for r in prompts.rows)
    assert len(set(tails)) > 1  # the prompts differ in length, so the tails differ too
    assert PositionTail((4, -5)).per_row(prompts) == tuple(max(t, 5) for t in tails)
    with_demos, _ = _setup(tiny, shared=True)
    assert PositionTail((4,)).per_row(with_demos) is None  # position 4 lies in the shared demonstrations
    assert PromptRunner(tiny, with_demos, tail=PositionTail((4,))).row_tails is None  # so: full forwards


@pytest.mark.parametrize("positions", [(4,), (4, -1), (3, 5)])
@pytest.mark.parametrize("skip", [False, True])
def test_per_row_tail_matches_full_forward_logits_and_grads(tiny, positions, skip):
    """Each row cached up to its own position (left padding, prompts of different lengths, Gemma's BOS):
    logits, loss and gradient equal the full forward's, on first runs and on cached re-runs, with single- and
    multi-token answers and vectors entering at block 0 and later."""
    prompts = _varied(tiny)
    answers = [[11, 12, 13], [14], [15, 16], [17, 18, 19], [20], [21, 22]]
    full = PromptRunner(tiny, prompts, tail=None)
    fast = PromptRunner(tiny, prompts, tail=tail_needed(positions), skip_early_layers=skip)
    assert fast.row_tails is not None and len(set(fast.row_tails)) > 1
    for index, layer in (([0, 2, 3, 5], 1), ([5, 1, 3, 0], 1), ([4, 1, 2], 0), ([0, 1, 2, 3, 4, 5], 2)):
        ans = [answers[i] for i in index]
        results = []
        for runner in (full, fast):
            theta = torch.randn(len(positions), tiny.d_model, generator=torch.Generator().manual_seed(0)) * 0.5
            theta.requires_grad_(True)
            edits = [VectorEdit(layer, p, theta[i]) for i, p in enumerate(positions)]
            logits, valid = runner.run(index, edits, answers=ans)
            loss = answer_loss(logits, ans, valid)
            loss.backward()
            # columns past a short answer are padding: their logits are never used (and differ by design)
            results.append((logits.detach()[valid], loss.detach(), theta.grad.clone()))
        (l_full, loss_full, g_full), (l_fast, loss_fast, g_fast) = results
        torch.testing.assert_close(l_fast, l_full, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(loss_fast, loss_full, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(g_fast, g_full, atol=1e-5, rtol=1e-4)
        assert g_full.abs().sum() > 0
    assert fast.cached_rows == len(prompts)
    # without vectors (next token only) the per-row layout gives the plain logits too
    torch.testing.assert_close(fast.run(range(6))[0], full.run(range(6))[0], atol=1e-4, rtol=1e-4)


def test_per_row_tail_refuses_a_position_before_a_rows_tail(llama):
    runner = PromptRunner(llama, _varied(llama), tail=PositionTail((5,)))
    with pytest.raises(ValueError, match=r"injected position 4 \(layer 1\) lies in the cached prefix"):
        runner.run([0, 1], [VectorEdit(1, 4, torch.zeros(llama.d_model))])


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("positions", [(-1,), (-2, -1)])
@pytest.mark.parametrize("cache_rows", [True, False])
def test_cached_prefix_matches_full_forward_logits_and_grads(tiny, shared, positions, cache_rows):
    prompts, answers = _setup(tiny, shared)
    full = PromptRunner(tiny, prompts, tail=None)
    fast = PromptRunner(tiny, prompts, tail=tail_needed(positions), cache_rows=cache_rows)
    fast.run(range(len(prompts)))  # rows are cached on first use
    assert (fast.cached_rows == len(prompts)) == cache_rows
    index = [0, 2, 3, 5]
    results = []
    for runner in (full, fast):
        theta = (torch.randn(len(positions), tiny.d_model, generator=torch.Generator().manual_seed(0)) * 0.5)
        theta.requires_grad_(True)
        edits = [VectorEdit(1, p, theta[i]) for i, p in enumerate(positions)]
        logits, valid = runner.run(index, edits, answers=[answers[i] for i in index])
        loss = answer_loss(logits, [answers[i] for i in index], valid)
        loss.backward()
        results.append((logits.detach(), loss.detach(), theta.grad.clone()))
    (l_full, loss_full, g_full), (l_fast, loss_fast, g_fast) = results
    torch.testing.assert_close(l_fast, l_full, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(loss_fast, loss_full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(g_fast, g_full, atol=1e-5, rtol=1e-4)
    assert g_full.abs().sum() > 0


def test_tail_longer_than_prompt_is_refused(llama):
    prompts, _ = _setup(llama, False)
    shortest = min(len(r) for r in prompts.rows)
    with pytest.raises(ValueError, match=f"tail {shortest + 1}"):
        PromptRunner(llama, prompts, tail=shortest + 1)


def test_batched_equals_unbatched(llama):
    prompts, _ = _setup(llama, False)
    runner = PromptRunner(llama, prompts, tail=None)
    batched, _ = runner.run(range(6))
    for i in range(6):
        single, _ = runner.run([i])
        torch.testing.assert_close(single[0], batched[i], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cache_rows", [True, False])
def test_multi_token_answers_teacher_forced_identically(tiny, cache_rows):
    prompts, _ = _setup(tiny, shared=False)
    answers = [[11, 12, 13], [14], [15, 16], [17, 18, 19], [20], [21, 22]]
    full = PromptRunner(tiny, prompts, tail=None)
    fast = PromptRunner(tiny, prompts, tail=1, cache_rows=cache_rows)
    # Batches mixing answer lengths differently each time exercise the remembered per-row states.
    for index in ([0, 1, 2, 3, 4, 5], [1, 4], [2, 0, 3], [5, 1, 3, 0]):
        grads, losses = [], []
        for runner in (full, fast):
            theta = torch.full((tiny.d_model,), 0.3, requires_grad=True)
            ans = [answers[i] for i in index]
            logits, valid = runner.run(index, [VectorEdit(2, -1, theta)], answers=ans)
            assert logits.shape[:2] == (len(index), max(map(len, ans))) and valid.sum() == sum(map(len, ans))
            loss = answer_loss(logits, ans, valid)
            loss.backward()
            grads.append(theta.grad)
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(grads[1], grads[0], atol=1e-5, rtol=1e-4)


def test_answer_loss_is_mean_log_prob_per_answer_token():
    logits = torch.randn(2, 3, 7)
    answers = [[1, 2, 3], [4]]
    valid = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    logp = logits.log_softmax(-1)
    expected = -((logp[0, 0, 1] + logp[0, 1, 2] + logp[0, 2, 3]) / 3 + logp[1, 0, 4]) / 2
    torch.testing.assert_close(answer_loss(logits, answers, valid), expected)


def test_partial_row_cache_gives_the_same_logits(llama):
    prompts, _ = _setup(llama, shared=False)
    whole = PromptRunner(llama, prompts, tail=1)
    part = PromptRunner(llama, prompts, tail=1, max_cache_bytes=2 * 3 * 2 * 16 * 4 * 12)
    first = [part.run(range(6))[0], whole.run(range(6))[0]]
    assert 0 < part.cached_rows < len(prompts) == whole.cached_rows
    torch.testing.assert_close(first[0], first[1])  # both first runs: the same batch, the same computation
    # now `part` recomputes its uncached rows' prefixes in a smaller batch than `whole` cached them: the same
    # numbers up to float rounding, as between the full and cached paths above
    torch.testing.assert_close(part.run(range(6))[0], whole.run(range(6))[0], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("shared", [False, True])
def test_first_layer_keeps_later_blocks_and_stays_exact_everywhere(tiny, shared):
    """A runner keeping only blocks >= 2 gives the full forward's logits and gradients for vectors entering
    at block 2 (cached path) and at block 0 (rows recomputed in full)."""
    prompts, answers = _setup(tiny, shared)
    full = PromptRunner(tiny, prompts, tail=None)
    late = PromptRunner(tiny, prompts, tail=1, first_layer=2)
    index = [1, 3, 4]
    ans = [answers[i] for i in index]
    for layer in (2, 0, 2):
        results = []
        for runner in (full, late):
            theta = torch.full((tiny.d_model,), 0.2, requires_grad=True)
            logits, valid = runner.run(index, [VectorEdit(layer, -1, theta)], answers=ans)
            answer_loss(logits, ans, valid).backward()
            results.append((logits.detach(), theta.grad))
        torch.testing.assert_close(results[1][0], results[0][0], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(results[1][1], results[0][1], atol=1e-5, rtol=1e-4)
    assert late.cached_rows == len(index)
    assert all(len(late.rows[i].keys) == tiny.n_layers - 2 for i in index)


@pytest.mark.parametrize("shared", [False, True])
def test_a_run_without_vectors_starts_where_the_kept_blocks_start(tiny, shared, monkeypatch):
    """Without vectors a runner keeping blocks >= 2 runs its cached rows from block 2 (no first pass of the early
    blocks: the trainer's no-vector validation is one such run) and gives the full forward's logits."""
    import ltvlib.forward as fw

    prompts, _answers = _setup(tiny, shared)
    late = PromptRunner(tiny, prompts, tail=1, first_layer=2)
    index = [0, 2, 3]
    late.run(index, [VectorEdit(2, -1, torch.zeros(tiny.d_model))])  # caches the rows from block 2
    starts: list[int] = []
    real = fw.forward_from_layer
    monkeypatch.setattr(fw, "forward_from_layer", lambda lm, hidden, start, *a, **k: starts.append(start) or real(
        lm, hidden, start, *a, **k))
    passes = late.first_pass
    monkeypatch.setattr(late, "first_pass", lambda *a, **k: pytest.fail("a cached row was recomputed in full"))
    logits, _ = late.run(index)
    monkeypatch.setattr(late, "first_pass", passes)
    assert starts == [2]
    expected, _ = PromptRunner(tiny, prompts, tail=None).run(index)
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("position", "fix"), [(-3, "tail=3 or more"), (0, r"tail=PositionTail\(\(0,\)\) or None")])
def test_position_in_the_cached_prefix_names_it_and_the_tail(llama, position, fix):
    prompts, _ = _setup(llama, shared=True)
    runner = PromptRunner(llama, prompts, tail=2)
    theta = torch.zeros(llama.d_model)
    with pytest.raises(ValueError, match=rf"injected position {position} \(layer 1\) lies in the cached prefix.*"
                                         rf"last tail=2 prompt tokens.*`tail` argument.*{fix}"):
        runner.run([0, 1], [VectorEdit(1, position, theta)])
    assert runner.cached_rows == 0  # refused before any forward
    runner.run([0, 1], [VectorEdit(1, -2, theta)])  # inside the tail: runs


def test_prefill_under_a_small_token_bound_caches_the_same_rows(llama):
    """Prefill in one batch and a row or two at a time (a token bound) keep the same keys, values and states."""
    prompts = _varied(llama)
    answers = answer_ids(llama.tokenizer, get_task("antonym"), ["cold"] * len(prompts.rows))
    one = PromptRunner(llama, prompts, tail=1, skip_early_layers=True)
    few = PromptRunner(llama, prompts, tail=1, skip_early_layers=True)
    seen = []
    original = few.first_pass
    few.first_pass = lambda index, *a, **k: seen.append(list(index)) or original(index, *a, **k)  # type: ignore[method-assign]
    size = [len(prompts.shared) + len(r) + len(a) for r, a in zip(prompts.rows, answers)]
    assert one.prefill(answers) == few.prefill(answers, max_tokens=2 * max(size)) == len(prompts.rows)
    assert len(seen) >= 3 and all(len(b) * max(size[i] for i in b) <= 2 * max(size) for b in seen)
    for i in range(len(prompts.rows)):
        a, b = one.rows[i], few.rows[i]
        torch.testing.assert_close(a.keys, b.keys, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(a.values, b.values, rtol=1e-4, atol=1e-5)
        assert a.states.keys() == b.states.keys()
        for k in a.states:
            torch.testing.assert_close(a.states[k], b.states[k], rtol=1e-4, atol=1e-5)


def test_prefill_splits_long_batches_at_its_own_smaller_bound(llama):
    """By default a prefill forward holds at most PREFILL_BATCH_TOKENS padded tokens (its first pass records every
    kept block, so its transient grows with the batch), below evaluation's DEFAULT_BATCH_TOKENS: twelve 300-token
    prompts (3,600 tokens) go in one forward under evaluation's bound but in several under the prefill's."""
    assert PREFILL_BATCH_TOKENS < DEFAULT_BATCH_TOKENS
    g = torch.Generator().manual_seed(0)
    rows = tuple(tuple(int(t) for t in torch.randint(4, len(llama.tokenizer), (300,), generator=g)) for _ in range(12))
    prompts = EncodedPrompts(shared=(), rows=rows, texts=("",) * len(rows))

    def batches(**kwargs: int) -> list[list[int]]:
        runner = PromptRunner(llama, prompts, tail=1)
        seen: list[list[int]] = []
        original = runner.first_pass
        runner.first_pass = lambda index, *a, **k: seen.append(list(index)) or original(index, *a, **k)  # type: ignore[method-assign]
        assert runner.prefill(**kwargs) == len(rows)
        return seen

    default = batches()
    assert len(default) >= 2 and all(300 * len(b) <= PREFILL_BATCH_TOKENS for b in default)
    assert sorted(i for b in default for i in b) == list(range(len(rows)))
    assert len(batches(max_tokens=DEFAULT_BATCH_TOKENS)) == 1


@pytest.mark.parametrize("first_layer", [0, 2])
@pytest.mark.parametrize("tail", [1, 3, PositionTail((2, -1))])
@pytest.mark.parametrize("with_answers", [False, True])
def test_cache_bound_is_what_prefill_keeps(tiny, first_layer, tail, with_answers):
    """The bytes computed from the prompts' lengths before a prefill equal those the prefill keeps (GQA geometry,
    per-row and shared demonstrations, tails counted from either end, teacher-forced answers)."""
    task = get_task("antonym")
    train = list(load_splits(task).train)
    for prompts in (_varied(tiny), encode_prompts(tiny.tokenizer, task, train[:5], shared_demos=train[20:22])):
        answers = answer_ids(tiny.tokenizer, task, [e.output for e in train[:len(prompts.rows)]]) if with_answers else None
        runner = PromptRunner(tiny, prompts, tail=tail, first_layer=first_layer)
        predicted = runner.cache_bound(answers)
        runner.prefill(answers)
        if runner.row_tails is None:  # a position inside the shared demonstrations: full forwards, nothing kept
            assert predicted == runner.cache_bytes == 0
            continue
        shared = runner.shared.nbytes if runner.shared is not None else 0
        assert runner.cached_rows == len(prompts.rows)
        assert predicted == runner.cache_bytes + shared > shared


def test_cache_bound_stops_at_the_runners_cap(llama):
    prompts = _varied(llama)
    whole = PromptRunner(llama, prompts, tail=1).cache_bound()
    capped = PromptRunner(llama, prompts, tail=1, max_cache_bytes=whole // 2)
    assert capped.cache_bound() == whole // 2
    capped.prefill()
    assert 0 < capped.cache_bytes <= whole // 2 and capped.cached_rows < len(prompts.rows)
    assert PromptRunner(llama, prompts, tail=None).cache_bound() == 0  # the full path keeps nothing


def _two_tasks(lm):
    out = []
    for name in ("antonym", "sst2"):
        task = get_task(name)
        queries = list(load_splits(task).train[:4])
        out.append((encode_prompts(lm.tokenizer, task, queries),
                    answer_ids(lm.tokenizer, task, [e.output for e in queries])))
    return out


@pytest.mark.parametrize("firsts", [(0, 0), (2, 0), (1, 2)])
def test_rows_of_several_runners_are_each_runners_own_run(tiny, firsts):
    """Rows of two tasks' runners in one batch, each row with its own vector, give each runner's own logits and
    gradients, whichever blocks each runner keeps and whether its rows were cached already."""
    from ltvlib.forward import run_rows

    (pa, aa), (pb, ab) = _two_tasks(tiny)
    layer = max(firsts)
    a = PromptRunner(tiny, pa, tail=1, first_layer=firsts[0])
    b = PromptRunner(tiny, pb, tail=1, first_layer=firsts[1])
    a.run([0], [VectorEdit(layer, -1, torch.zeros(tiny.d_model))], answers=[aa[0]])  # one row cached beforehand
    rows = [(a, 0), (b, 2), (a, 3), (b, 1)]
    answers = [aa[0], ab[2], aa[3], ab[1]]
    theta = torch.stack([torch.full((tiny.d_model,), 0.1 * (k + 1)) for k in range(4)]).requires_grad_(True)
    logits, valid = run_rows(rows, [VectorEdit(layer, -1, theta)], answers=answers)
    answer_loss(logits, answers, valid).backward()
    for k, (runner, i) in enumerate(rows):
        own = theta.detach()[k].clone().requires_grad_(True)
        alone = PromptRunner(tiny, pa if runner is a else pb, tail=None)
        ref, ref_valid = alone.run([i], [VectorEdit(layer, -1, own)], answers=[answers[k]])
        n = ref.shape[1]
        torch.testing.assert_close(logits[k : k + 1, :n], ref, atol=1e-4, rtol=1e-4)
        # the batch loss is a mean over 4 rows: each row's gradient is a quarter of its own loss's
        (answer_loss(ref, [answers[k]], ref_valid) / 4).backward()
        assert theta.grad is not None
        torch.testing.assert_close(theta.grad[k], own.grad, atol=1e-5, rtol=1e-4)


def test_runners_that_cannot_share_a_batch_say_why(llama):
    from ltvlib.forward import run_rows

    (pa, _), (pb, _) = _two_tasks(llama)
    task = get_task("antonym")
    demos = encode_prompts(llama.tokenizer, task, list(load_splits(task).train[:2]),
                           shared_demos=list(load_splits(task).train[10:12]))
    with pytest.raises(ValueError, match="different shared prefixes"):
        run_rows([(PromptRunner(llama, pa, tail=1), 0), (PromptRunner(llama, demos, tail=1), 0)])
    with pytest.raises(ValueError, match="full forwards"):
        run_rows([(PromptRunner(llama, pa, tail=1), 0), (PromptRunner(llama, pb, tail=None), 0)])
    with pytest.raises(ValueError, match="at least one row"):
        run_rows([])


@pytest.mark.parametrize("shared", [False, True])
def test_rows_cached_without_answers_are_exact_with_answers_from_a_later_block(tiny, shared):
    """A runner keeping blocks >= 2 whose rows were cached by a run without answers (an evaluation) gives the full
    forward's logits when later run with teacher-forced answers: the blocks it does not keep are recomputed, not
    read as empty."""
    prompts, answers = _setup(tiny, shared)
    late = PromptRunner(tiny, prompts, tail=1, first_layer=2)
    index = [0, 2, 4]
    late.run(index, [VectorEdit(2, -1, torch.zeros(tiny.d_model))])
    theta = torch.full((tiny.d_model,), 0.2)
    ans = [answers[i] for i in index]
    for _ in range(2):  # the second run reads the states the first one kept
        got, _ = late.run(index, [VectorEdit(2, -1, theta)], answers=ans)
        want, _ = PromptRunner(tiny, prompts, tail=None).run(index, [VectorEdit(2, -1, theta)], answers=ans)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
