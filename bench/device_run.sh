#!/usr/bin/env bash
# One call on the lent GPU machine: install the carried wheels, run the GPU tests, then the DRAM
# benchmark (which runs `calib run` itself) for each suite named. Results land in $OUT:
#   gpu.txt (nvidia-smi, GPU tests), bench-<suite>.md,
#   bench-<suite>.json, run-<suite>.tgz (executed notebooks, results database, profile): at most 8
#   files, the most the device tool brings back
#   device tool: carry [".whl"], command: bash bench/device_run.sh quick full
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
python3 -m ipykernel install --user --name python3 >/dev/null || exit 1
export XDG_DATA_HOME=/tmp/xdg
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee $OUT/gpu.txt
timeout 180 python3 -m pytest -q -m gpu tests/test_gpu.py 2>&1 | tee -a $OUT/gpu.txt
for suite in "${@:-quick}"; do
  work=/tmp/bench-$suite
  rm -rf "$work"  # a warm machine keeps /tmp: a reused run folder would resume, not measure
  timeout ${BENCH_TIMEOUT:-400} python3 bench/ceilings.py --out $work --suite "$suite" 2>&1 | grep -v IPKernelApp
  cp $work/bench-dram.md $OUT/bench-$suite.md; cp $work/bench-dram.json $OUT/bench-$suite.json
  (cd $work && tar czf $OUT/run-$suite.tgz run profile.json)
done
