"""Which part of chapter 02 makes its peak resident memory (issue 15's 6 GiB per chapter).

Runs chapter 02's measurement (``FlexView.measure``: every (task, column) pair through
``ltvlib.study.flexibility.setting_result``) in this process on the cache ``LTV_CACHE_DIR`` points at, and prints one
row per pair: seconds, the true peak resident memory during that pair (the kernel's high-water mark ``VmHWM``, reset
before each pair by writing 5 to ``/proc/self/clear_refs``), the resident memory after it, the bytes the prompt store
and the memoised test sets hold after it, and the innermost ``ltvlib`` calls the main thread was in when a sampling
thread (every 50 ms) saw that pair's highest resident memory.

For a cold measurement give it a cache that holds chapter 00's vectors (the baseline column reads them) but not
chapter 02's, e.g. a copy of a cold book's cache with the files chapter 02 wrote removed (``--drop-after`` /
``--drop-before``: the modification-time window, local ISO date and time, of the files to leave out of the copy).

    python bench/chapter02_memory.py --cache-from /path/to/cold/cache --drop-after 2026-12-04T06:07:40 \
        --drop-before 2026-12-04T06:55:40
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _reset_peak() -> None:
    # Linux >= 4.0: writing 5 resets VmHWM to the current RSS
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


class PeakSampler(threading.Thread):
    """Samples this process's RSS every ``period`` seconds; keeps the main thread's ``ltvlib`` frames at the highest."""

    def __init__(self, period: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.period, self.main_id = period, threading.main_thread().ident
        self.best_kib, self.best_stack = 0, ""
        self.lock, self.stop = threading.Lock(), threading.Event()

    def reset(self) -> None:
        with self.lock:
            self.best_kib, self.best_stack = 0, ""

    def run(self) -> None:
        while not self.stop.wait(self.period):
            rss = _status_kib("VmRSS")
            with self.lock:
                if rss <= self.best_kib:
                    continue
                frame = sys._current_frames().get(self.main_id)
                names = [f"{Path(fs.filename).stem}.{fs.name}" for fs in traceback.extract_stack(frame)
                         if "/ltvlib/" in fs.filename] if frame is not None else []
                self.best_kib, self.best_stack = rss, " > ".join(names[-4:])


def _copy_cache(src: Path, dst: Path, after: dt.datetime | None, before: dt.datetime | None) -> int:
    """Copy ``results`` and ``vectors`` of ``src`` into ``dst`` (link the rest), without the files whose modification
    time lies in [after, before]; returns how many were left out."""
    dropped = 0
    for part in src.iterdir():
        if part.name not in ("results", "vectors"):
            (dst / part.name).symlink_to(part.resolve())
            continue
        for f in part.rglob("*"):
            if not f.is_file():
                continue
            t = dt.datetime.fromtimestamp(f.stat().st_mtime)
            if after is not None and before is not None and after <= t <= before:
                dropped += 1
                continue
            out = dst / f.relative_to(src)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, out)
    return dropped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache-from", type=Path, required=True, help="a book cache to copy (not modified)")
    ap.add_argument("--drop-after", type=dt.datetime.fromisoformat,
                    help="YYYY-MM-DDTHH:MM:SS (the copy's files modified from then ...)")
    ap.add_argument("--drop-before", type=dt.datetime.fromisoformat, help="YYYY-MM-DDTHH:MM:SS (... until then are left out)")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--model", default="smollm2-135m")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="ltv-ch02-memory-") as tmp:
        dropped = _copy_cache(args.cache_from, Path(tmp), args.drop_after, args.drop_before)
        os.environ["LTV_CACHE_DIR"] = tmp
        from ltvlib import memo, prompt_store
        from ltvlib.models import load_model
        from ltvlib.study import flexibility_tables
        from ltvlib.study.flexibility import late_settings, table1_settings
        from ltvlib.study.flexibility_tables import FlexView
        from ltvlib.study.ltv_report import LTVLedger
        from ltvlib.study.plans import flexibility_plan

        plan = flexibility_plan(args.profile)
        run, flex, task_list = plan.run_sizes, plan.sizes, plan.tasks
        lm = load_model(args.model, device="cpu")
        settings = table1_settings(lm.n_layers, layer_steps=flex.layer_steps, icl_shots=flex.icl_shots)
        late = late_settings(lm.n_layers, flex.n_late) if flex.n_late != 0 else []
        view = FlexView(settings, late, task_list, {s.name: flex.tasks_of(s.name, task_list) for s in settings + late},
                        base_seeds=plan.base_seeds, other_seeds=plan.other_seeds, ledger=LTVLedger())
        print(f"model {lm.name}, profile {args.profile}, {dropped} cached files left out, store bound "
              f"{prompt_store.STORE.max_bytes / 2**30:.2f} GiB, RSS after loading {_status_kib('VmRSS') / 2**20:.2f} GiB\n")
        print("| task | column | seconds | peak RSS (GiB) | RSS after (GiB) | store (GiB) | memo'd test sets (GiB) "
              "| where the sampled peak was |")
        print("|---|---|---|---|---|---|---|---|")
        sampler = PeakSampler()
        sampler.start()
        overall = 0.0
        measure_pair = flexibility_tables.setting_result

        def probed(lm: Any, task: str, run: Any, s: Any, **kw: Any) -> Any:
            """``setting_result`` with its peak memory, the caches after it and where the sampled peak was."""
            nonlocal overall
            _reset_peak()
            sampler.reset()
            t0 = time.time()
            result = measure_pair(lm, task, run, s, **kw)
            peak = _status_kib("VmHWM") / 2**20
            overall = max(overall, peak)
            sets = sum(prompt_store.value_bytes(v) for name in ("ltvs.test_sets", "extracted.evalsets")
                       for v in memo.entries(lm, name).values())
            print(f"| {task} | {s.name} | {time.time() - t0:.0f} | {peak:.2f} | {_status_kib('VmRSS') / 2**20:.2f} "
                  f"| {prompt_store.STORE.nbytes / 2**30:.2f} | {sets / 2**30:.2f} | {sampler.best_stack} "
                  f"({sampler.best_kib / 2**20:.2f}) |", flush=True)
            return result

        t_all = time.time()
        flexibility_tables.setting_result = probed  # the chapter's own loop (FlexView.measure) calls it per pair
        try:
            view.measure(lm, run, n_test=plan.n_test, seed=0)
        finally:
            flexibility_tables.setting_result = measure_pair
        sampler.stop.set()
        print(f"\nall pairs: {time.time() - t_all:.0f} s, highest peak {overall:.2f} GiB, store peak "
              f"{prompt_store.STORE.peak_bytes / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
