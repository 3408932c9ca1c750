#!/usr/bin/env bash
# One call on the lent GPU machine: install the carried wheels, run the GPU tests, then the
# benchmarks asked for, each bounded by its own timeout so that one hang costs only its share.
#   device tool: carry [".whl"], command: bash bench/device_run.sh [STEP ...]
# .whl: bash ../shared/device/wheels.sh sqlalchemy alembic filelock platformdirs nvidia-ml-py pytest-timeout;
# the tree and the wheels travel within 64 MiB: jedi, parso and debugpy (optional to IPython/ipykernel) can go.
# The tree travels in about 25 MiB (du of git ls-files, 2026-12-07): every recording under bench/results is
# stored .json.gz (gzip -9 -n); the uncompressed ones had grown it past the limit with the wheels. A call
# without notebooks (heuristics-seedN, splitk-seedN,
# gpu-tests, verify-shipped) carries only what calib itself needs (NOTEBOOK_WHEELS moved out of .whl).
# NOTEBOOK_WHEELS: papermill ipykernel ipython jupyter_client jupyter_core nbclient nbformat pyzmq tornado
#   traitlets prompt_toolkit wcwidth jsonschema jsonschema_specifications referencing rpds_py fastjsonschema
#   pexpect ptyprocess pure_eval stack_data asttokens executing comm matplotlib_inline nest_asyncio2
#   ipython_pygments_lexers entrypoints tenacity
# Steps, in the order given (default: quick):
#   quick | full   bench/ceilings.py for that suite (it runs `calib run` itself); the run folder
#                  (executed notebooks, report, profile) is kept as run-<suite>.tgz
#   autotune       bench/autotune.py --calib-run (the conv2d and DRAM-shape caches)
#   queue-probe    bench/queue_position_probe.py (a sample's time by its place in a held batch)
#   fma            bench/fma_shapes.py (FP32 FMA kernel shapes against the clock peak)
#   verify         bench/verify_h200.sh (calib verify, idle and beside a competing load)
#   heuristics     bench/heuristics_h200.sh (heuristics against exhaustive search)
#   heuristics-seedN  the same on the problem set of seed N, into heuristics-seedN/
#   splitk-seedN   split-K's evaluation alone, SK_COUNT (1000) problems of seed N, into splitk-seedN/;
#                  SK_PROFILE=PATH reads that profile (e.g. /tmp/bench-quick/profile.json after `quick`
#                  in the same call: this GPU's own; a warm machine keeps an earlier call's there, so
#                  ask for `quick` first) instead of the lookup order's
#   norm-seedN     normalization's evaluation alone, 100 problems of seed N, into norm-seedN/
#                  (NM_BUDGET_S, NM_TIMEOUT as SK_*)
#   splitk-focusN  the same on SKF_COUNT (1000) fp32 problems of at most 64 output rows
#                  (bench/splitk_focus.py; SKF_BUDGET_S, SKF_TIMEOUT as SK_*)
#   verify-shipped calib verify --profile profiles/nvidia-h200.json (default thresholds)
#   gpu-tests      the GPU tests again, as a step: after a fresh-machine suite (GPU_TESTS_TIMEOUT=1
#                  skips them at the start, since they fill CuPy's kernel cache and the suite would
#                  no longer run on a freshly started machine's empty one)
# Step timeouts add up past the device tool's 600 s: ask for the steps that fit (GPU_TESTS_TIMEOUT,
# BENCH_TIMEOUT, ... shorten them; DEADLINE_S=590 cuts the last step short at the call's end).
# The device tool brings back at most 8 files: gpu.txt (nvidia-smi, GPU tests), summary.txt (each
# step's exit status and wall time), results.tgz (what each step wrote but the run folders, unpack
# with `tar xzf`) and run-<suite>.tgz per suite (at most 5 suites a call).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
if python3 -c "import ipykernel" 2>/dev/null; then  # not carried by a call without notebooks
  python3 -m ipykernel install --user --name python3 >/dev/null || exit 1
fi
export XDG_DATA_HOME=/tmp/xdg
res=/tmp/device-results
rm -rf "$res" /tmp/xdg && mkdir -p "$res"  # a warm machine keeps /tmp: a reused folder would resume, not measure
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee $OUT/gpu.txt
gpu_tests=$(grep -l "mark.gpu" tests/test_*.py)  # collecting only these: the others need what the image lacks
timeout ${GPU_TESTS_TIMEOUT:-180} python3 -m pytest -q -m gpu $gpu_tests 2>&1 | tail -15 | tee -a $OUT/gpu.txt

step() {  # step NAME TIMEOUT_S COMMAND...: run, log to $res/NAME.log, note status and wall time
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS left=$(( ${DEADLINE_S:-1000000} - SECONDS - 10 ))  # DEADLINE_S: the whole call's
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -le 0 ]; then echo "$name: skipped, DEADLINE_S reached" | tee -a $OUT/summary.txt; return; fi
  timeout "$limit" "$@" >"$res/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc, $((SECONDS - t0)) s (limit $limit s)" | tee -a $OUT/summary.txt
  pack  # after every step: a call killed at its limit keeps what ran
}
pack() {  # results.tgz without the run folders (each ~5 MB): those come back as files of their own,
  # since the device tool returns files of at most 16 MiB (four suites in one archive were lost)
  (cd "$res" && tar czf $OUT/results.tgz --exclude='run-*.tgz' .)
  cp "$res"/run-*.tgz $OUT/ 2>/dev/null
}

declare -A seen
for s in "${@:-quick}"; do
  case $s in
    quick|full)  # a suite asked for again (quick quick quick: the launch CIs over three runs) gets -2, -3
      seen[$s]=$(( ${seen[$s]:-0} + 1 )); tag=$s; [ "${seen[$s]}" -gt 1 ] && tag=$s-${seen[$s]}
      work=/tmp/bench-$tag; rm -rf "$work"
      step "ceilings-$tag" "${BENCH_TIMEOUT:-300}" python3 bench/ceilings.py --out "$work" --suite "$s"
      cp "$work"/bench-dram.md "$res/bench-$tag.md" 2>/dev/null
      cp "$work"/bench-dram.json "$res/bench-$tag.json" 2>/dev/null
      (cd "$work" && tar czf "$res/run-$tag.tgz" run profile.json 2>/dev/null)
      pack ;;  # again, now that the suite's tables and run folder are there
    autotune) step autotune "${AUTOTUNE_TIMEOUT:-300}" python3 bench/autotune.py --calib-run --out "$res/autotune" ;;
    queue-probe) step queue-probe 120 env OUT="$res" python3 bench/queue_position_probe.py ;;
    fma) step fma 60 python3 bench/fma_shapes.py --out "$res/fma-shapes.md" ;;
    verify) step verify "${VERIFY_TIMEOUT:-420}" env OUT="$res" bash bench/verify_h200.sh ;;
    heuristics) step heuristics "${HEURISTICS_TIMEOUT:-360}" env OUT="$res" bash bench/heuristics_h200.sh ;;
    heuristics-seed*)  # another problem set (heuristics-seed1: problems the heuristics were not tuned on)
      seed=${s#heuristics-seed}
      step "$s" "${HEURISTICS_TIMEOUT:-360}" env OUT="$res/$s" SEED="$seed" bash bench/heuristics_h200.sh ;;
    splitk-seed*)  # split-K alone, SK_COUNT problems of seed N (training data for its corrections: seeds >= 1000)
      seed=${s#splitk-seed}; mkdir -p "$res/$s"
      step "$s" "${SK_TIMEOUT:-200}" python3 -m calib heuristics evaluate --kind matmul_splitk --backend cupy \
        --count "${SK_COUNT:-1000}" --seed "$seed" --max-bytes 1.0e9 --budget-s "${SK_BUDGET_S:-170}" \
        ${SK_PROFILE:+--profile "$SK_PROFILE"} \
        --db "sqlite:////dev/shm/calib-splitk-$seed.sqlite" --out "$res/$s/heuristics-matmul_splitk" --progress ;;
    norm-seed*)  # normalization alone, 100 problems of seed N (a live check of a normalization change)
      seed=${s#norm-seed}; mkdir -p "$res/$s"
      step "$s" "${NM_TIMEOUT:-120}" python3 -m calib heuristics evaluate --kind normalization --backend cupy \
        --count 100 --seed "$seed" --max-bytes 1.0e9 --budget-s "${NM_BUDGET_S:-90}" \
        --db "sqlite:////dev/shm/calib-norm-$seed.sqlite" --out "$res/$s/heuristics-normalization" --progress ;;
    splitk-focus*)  # split-K alone on SKF_COUNT fp32 problems of at most 64 rows drawn from seed N
      # (bench/splitk_focus.py: where its worst cases live; training data, seeds >= 2000)
      seed=${s#splitk-focus}; mkdir -p "$res/$s"
      python3 bench/splitk_focus.py --seed "$seed" --count "${SKF_COUNT:-1000}" --out "$res/$s/problems.jsonl" \
        >/dev/null || { echo "$s: no problems written" | tee -a $OUT/summary.txt; continue; }
      step "$s" "${SKF_TIMEOUT:-200}" python3 -m calib heuristics evaluate --kind matmul_splitk --backend cupy \
        --problems "$res/$s/problems.jsonl" --budget-s "${SKF_BUDGET_S:-170}" \
        --db "sqlite:////dev/shm/calib-splitk-f$seed.sqlite" --out "$res/$s/heuristics-matmul_splitk" --progress ;;
    verify-shipped)  # calib verify as a user runs it, against the profile shipped for this GPU
      step verify-shipped 60 sh -c "python3 -m calib verify --profile profiles/nvidia-h200.json --budget-s 10 \
        > $res/verify-shipped.txt 2>&1; echo exit \$? >> $res/verify-shipped.txt" ;;
    gpu-tests)
      step gpu-tests "${GPU_TESTS_STEP_TIMEOUT:-180}" python3 -m pytest -q -m gpu $gpu_tests
      tail -15 "$res/gpu-tests.log" >> $OUT/gpu.txt ;;
    *) echo "unknown step $s" | tee -a $OUT/summary.txt ;;
  esac
done
pack
cat $OUT/summary.txt
