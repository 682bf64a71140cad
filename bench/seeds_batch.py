"""Would 3 seeds as rows of one batch pay? Time a training step (forward + backward, warm caches) on 16 rows
and on 48 rows (3 x 16) at layer 15, antonym, and compare 3 x t(16) with t(48)."""
import time

import torch

from ltvlib.forward import tail_needed
from ltvlib.inject import VectorEdit
from ltvlib.ltv import _training_prompts, answer_loss
from ltvlib.models import load_model
from ltvlib.prompts import answer_ids
from ltvlib.tasks import get_task, load_splits

lm = load_model("smollm2-135m", device="cpu")
task = get_task("antonym")
sp = load_splits(task, seed=0, n_train=600, n_val=200)
train = list(sp.train)
data = _training_prompts(lm, task, train, 0, 1, tail_needed((-1,)), 0, 15)
runner = data.runners[0]
ans = answer_ids(lm.tokenizer, task, [e.output for e in train])
g = torch.Generator().manual_seed(0)
def step(n):
    idx = torch.randperm(len(train), generator=g)[:n].tolist()
    a = [ans[i] for i in idx]
    theta = (torch.randn(n, lm.d_model) * 0.1).requires_grad_(True)  # a vector per row: seeds as rows
    logits, valid = runner.run(idx, [VectorEdit(15, -1, theta)], answers=a)
    answer_loss(logits, a, valid).backward()
for n in (16, 48): step(n)
res = {}
for rep in range(3):
    for n in (16, 48):
        t = time.perf_counter()
        for _ in range(5): step(n)
        res.setdefault(n, []).append((time.perf_counter() - t) / 5)
t16, t48 = min(res[16]), min(res[48])
print(f"step 16 rows {t16*1e3:.0f} ms, 48 rows {t48*1e3:.0f} ms: 3 x 16 = {3*t16*1e3:.0f} ms -> seeds together {3*t16/t48:.2f}x")
