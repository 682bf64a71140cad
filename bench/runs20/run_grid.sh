#!/bin/bash
# Session 20: issue 13's check grid re-run on main: two 1-thread workers pulling jobs from a jobs file
# (bench/runs20/jobs.txt unless named: `bash bench/runs20/run_grid.sh jobs_trec3.txt`).
# Each line: <name> <seed-tag> <layer_recipes.py arguments>; output bench/runs20/<name>-<seed-tag>.md, written
# only when the run finished (a failed run leaves <name>-<seed-tag>.md.tmp and its .err).
cd "$(dirname "$0")/../.."
run_one() {
  name=$1; tag=$2; shift 2
  out=bench/runs20/$name-$tag.md; err=bench/runs20/$name-$tag.err
  OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/layer_recipes.py --single-run --share-store \
    --recipes 'lr/3,default,lr*3' "$@" > "$out.tmp" 2> "$err" && mv "$out.tmp" "$out"
  rc=$?
  [ -s "$err" ] || rm -f "$err"
  echo "$(date +%T) done $name-$tag rc=$rc"
}
export -f run_one
xargs -P 2 -L 1 bash -c 'run_one "$@"' _ < "bench/runs20/${1:-jobs.txt}"
