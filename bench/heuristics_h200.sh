#!/usr/bin/env bash
# The heuristics against exhaustive search on a GPU (issue 14): one evaluation per scheduler kind
# with --backend cupy, each bounded twice (--budget-s: start no problem after it; timeout: kill it),
# about 5 minutes in all (budgets: PW_BUDGET_S, NM_BUDGET_S, SK_BUDGET_S; SEED picks the problem set).
# Writes $OUT/heuristics-<kind>.json and .md, and $OUT/heuristics.md.
#   device tool: carry [".whl"], command: bash bench/device_run.sh heuristics
#   (or, with calib installed: OUT=/tmp/h bash bench/heuristics_h200.sh)
set -uo pipefail
OUT=${OUT:-/tmp/heuristics-out}
mkdir -p "$OUT"
db="sqlite:////dev/shm/calib-heuristics-$$.sqlite"  # tmpfs: a timing row costs ~3 ms there, ~11 ms on disk
py=${PYTHON:-python3}
run() {  # kind budget_s timeout_s count max_bytes
  local kind=$1 budget=$2 limit=$3 count=$4 max=$5 t0=$SECONDS
  echo "heuristics: $kind ($count problems, budget ${budget} s, killed after ${limit} s)" >&2
  timeout -k 5 "$limit" "$py" -m calib heuristics evaluate --kind "$kind" --backend cupy --count "$count" \
    --seed "${SEED:-0}" --max-bytes "$max" --budget-s "$budget" --db "$db" --out "$OUT/heuristics-$kind" --progress \
    >/dev/null 2>>"$OUT/heuristics.log"
  echo "$kind: exit $?, $((SECONDS - t0)) s" | tee -a "$OUT/heuristics-summary.txt" >&2
}
run pointwise ${PW_BUDGET_S:-80} $(( ${PW_BUDGET_S:-80} + 20 )) 100 1.0e9
run normalization ${NM_BUDGET_S:-90} $(( ${NM_BUDGET_S:-90} + 25 )) 100 1.0e9  # NVRTC: about 20 s of its budget compiles the 2 modules
run matmul_splitk ${SK_BUDGET_S:-45} $(( ${SK_BUDGET_S:-45} + 20 )) 100 1.0e9
t0=$SECONDS  # the learned predictor on CuPy library ops: learned from 3 sizes (6 points each, within 5%), checked at 34 up to 4 GB (the 12 of before among them); the file is written after each op
timeout -k 5 45 "$py" -m calib.heuristics.learned_eval --backend cupy --out "$OUT/heuristics-learned" \
  >/dev/null 2>>"$OUT/heuristics.log"
echo "learned: exit $?, $((SECONDS - t0)) s" | tee -a "$OUT/heuristics-summary.txt" >&2
{ echo "# calib heuristics evaluate on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(date -u +%F)"
  echo; cat "$OUT/heuristics-summary.txt"; echo
  for k in pointwise normalization matmul_splitk learned; do cat "$OUT/heuristics-$k.md" 2>/dev/null; echo; done
} > "$OUT/heuristics.md"
rm -f /dev/shm/calib-heuristics-$$.sqlite*
cat "$OUT/heuristics.md"
