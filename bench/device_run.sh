#!/usr/bin/env bash
# One call on the lent GPU machine: install the carried wheels, run the GPU tests, then the DRAM
# benchmark (which runs `calib run` itself). Everything lands in $OUT.
#   device tool: carry [".whl"], command: bash bench/device_run.sh [quick|full]
set -uo pipefail
suite=${1:-quick}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
python3 -m ipykernel install --user --name python3 >/dev/null || exit 1
export XDG_DATA_HOME=$OUT/xdg
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee $OUT/gpu.txt
python3 -m pytest -q -m gpu tests/test_gpu.py 2>&1 | tee $OUT/pytest-gpu.txt
python3 bench/copy_explore.py 2>&1 | tee $OUT/copy-explore.txt
[ "${EXPLORE_ONLY:-0}" = 1 ] && exit 0
python3 bench/dram_vs_memcpy.py --out $OUT/bench --suite "$suite" 2>&1 | tee $OUT/bench.log
rm -rf $OUT/bench/run/*.sqlite-* 2>/dev/null
cd $OUT/bench && tar czf $OUT/run.tgz run profile.json && rm -rf run
