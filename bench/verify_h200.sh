#!/usr/bin/env bash
# calib verify on an H200 against the shipped profile: once idle (expects CONSISTENT, exit 0), then
# while a competing process loads the GPU (expects DRIFT, exit 1). Both outputs, their exit status and
# wall time against the budget go to $OUT/verify.txt.
#
# The shipped profile was measured on another host and before later calibration changes, so its
# launch latency (the host's as much as the GPU's) and anything whose calibration changed since may
# drift on their own. The script therefore also calibrates the four sentinels' notebooks here
# (`calib run --suite quick`, about 40 s) and verifies that local profile, idle and loaded
# (LOCAL=0 skips it).
#
# Every verify gets $VERIFY_ARGS, by default `--threshold launch.latency_us=0.3 --threshold
# compute.bf16.tensor_tflops=0.05`: launch + synchronize is timed on the host, and one H200 host gave
# 9.97 us in `calib run` and 12.39 us in a verify two minutes later; bf16 matmul moved by about 3%
# between runs (786-815 TFLOP/s; bench/results/2026-12-01-h200-verify.md). At the default 2% these
# two alone would decide many checks. Set VERIFY_ARGS= to see the defaults.
#
#   through bench/device_run.sh:  bash bench/device_run.sh verify        (device tool, carry [".whl"])
#   alone, from the repository:   OUT=/tmp/out PYTHONPATH=$PWD bash bench/verify_h200.sh
#
# The first idle run compiles the sentinels' kernels and searches the DRAM launch shape (both cached
# on disk after it), so it is run twice: "cold" and "warm"; the budget is for the warm one. Nothing
# can hang: every command has a timeout, and the load process is killed on exit whatever happens
# (it also stops itself after LOAD_S seconds).
set -uo pipefail
OUT=${OUT:?set OUT to the folder for verify.txt}
export PYTHONPATH=${PYTHONPATH:-$PWD}
PROFILE=${PROFILE:-profiles/nvidia-h200.json}
BUDGET=${BUDGET_S:-10}
LIMIT=${VERIFY_LIMIT_S:-90}   # per verify command
LOAD_S=${LOAD_S:-100}
VERIFY_ARGS=${VERIFY_ARGS---threshold launch.latency_us=0.3 --threshold compute.bf16.tensor_tflops=0.05}
report=$OUT/verify.txt
mkdir -p "$OUT"
: >"$report"

load_pid=""
cleanup() {
  if [ -n "$load_pid" ] && kill -0 "$load_pid" 2>/dev/null; then
    kill "$load_pid" 2>/dev/null
    sleep 1
    kill -9 "$load_pid" 2>/dev/null
  fi
}
trap cleanup EXIT INT TERM

run_verify() {  # run_verify LABEL EXPECTED_EXIT [PROFILE]
  local label=$1 expected=$2 profile=${3:-$PROFILE} t0 t1 rc
  echo "=== $label: calib verify --profile $profile --budget-s $BUDGET $VERIFY_ARGS (expect exit $expected) ===" \
    >>"$report"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086 # VERIFY_ARGS is a list of words
  timeout "$LIMIT" python3 -m calib verify --profile "$profile" --budget-s "$BUDGET" $VERIFY_ARGS >>"$report" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  python3 - "$label" "$rc" "$expected" "$t0" "$t1" "$BUDGET" >>"$report" <<'EOF'
import sys
label, rc, expected, t0, t1, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *map(float, sys.argv[4:])
wall = t1 - t0
verdict = "as expected" if rc == expected else ("TIMED OUT" if rc == 124 else "NOT as expected")
print(f"--- {label}: exit {rc} (expected {expected}: {verdict}); process wall time {wall:.1f} s "
      f"against a budget of {budget:g} s ({'within' if wall <= budget else 'over'}; includes Python and CuPy start-up)\n")
EOF
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu \
  --format=csv >>"$report" 2>&1
echo >>"$report"

run_verify "idle, cold (compiles kernels, searches the DRAM launch shape)" 0
run_verify "idle, warm" 0

local_profile=""
if [ "${LOCAL:-1}" = 1 ]; then
  work=$(mktemp -d)
  echo "=== calibrating the sentinels' notebooks here (calib run --suite quick) ===" >>"$report"
  if timeout "${CALIB_RUN_LIMIT_S:-240}" python3 -m calib run --backend cupy --suite quick --no-progress \
       --notebook launch_latency --notebook memory_bandwidth --notebook compute_throughput \
       --notebook matmul_throughput --profile "$work/local.json" --run-dir "$work/run" >"$OUT/calib-run.log" 2>&1; then
    local_profile=$work/local.json
    grep -E "wall time|launch.latency_us|memory.dram.read_bandwidth_gbps |compute.fp32|compute.bf16" \
      "$OUT/calib-run.log" >>"$report"
    echo >>"$report"
    cp "$local_profile" "$OUT/local-profile.json"
    echo "=== calib diff $PROFILE local-profile.json (the shipped profile against this machine's) ===" >>"$report"
    timeout 60 python3 -m calib diff "$PROFILE" "$local_profile" --threshold 0.02 >>"$report" 2>&1
    echo >>"$report"
    run_verify "idle, against the profile just measured here" 0 "$local_profile"
  else
    echo "calib run failed (exit $?): see calib-run.log; the local profile is skipped" >>"$report"
  fi
fi

# A competing process: bf16 matmuls and a memory-bound update back to back, for LOAD_S seconds at most.
ready=$(mktemp)
rm -f "$ready"
timeout $((LOAD_S + 10)) python3 - "$ready" "$LOAD_S" >>"$OUT/load.log" 2>&1 <<'EOF' &
import sys, time
import cupy as cp
ready, seconds = sys.argv[1], float(sys.argv[2])
a = cp.random.standard_normal((8192, 8192), dtype=cp.float32).astype(cp.float16)
b = cp.random.standard_normal((8192, 8192), dtype=cp.float32).astype(cp.float16)
x = cp.zeros(2**30, dtype=cp.float32)  # 4 GiB: far beyond L2
cp.cuda.Device().synchronize()
open(ready, "w").close()
end = time.time() + seconds
n = 0
while time.time() < end:
    c = a @ b
    x += 1.0
    n += 1
    if n % 4 == 0:
        cp.cuda.Device().synchronize()
print(f"load: {n} rounds of an 8192^3 fp16 matmul and a 4 GiB update in {seconds:g} s")
EOF
load_pid=$!
for _ in $(seq 60); do [ -e "$ready" ] && break; sleep 0.5; done
if [ -e "$ready" ]; then
  echo "(a competing process, pid $load_pid, runs fp16 matmuls and a 4 GiB update for up to $LOAD_S s)" >>"$report"
  nvidia-smi --query-gpu=utilization.gpu,power.draw,clocks.sm --format=csv,noheader >>"$report" 2>&1
  run_verify "loaded by a competing process" 1
  [ -n "$local_profile" ] && run_verify "loaded, against the profile just measured here" 1 "$local_profile"
else
  echo "the load process did not start within 30 s: see load.log" >>"$report"
fi
cleanup
rm -f "$ready"
cat "$report"
