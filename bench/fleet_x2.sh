#!/usr/bin/env bash
# On a machine with two GPUs: one DRAM sweep enqueued by `calib sweep --wait`, drained by two
# `calib worker` processes, one per GPU (CUDA_VISIBLE_DEVICES), into one SQLite database; then the
# jobs and a read-bandwidth fit per GPU id. Writes $OUT/fleet.txt and $OUT/fleet.sqlite.
#   device tool, kind nvidia-h200-x2: carry [".whl"], command: bash bench/fleet_x2.sh
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
export CALIB_DB_URL=sqlite:////tmp/fleet.sqlite XDG_DATA_HOME=/tmp/xdg
exec > >(tee $OUT/fleet.txt) 2>&1
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv
python3 -m calib sweep --backend cupy --label fleet-x2 --suite quick --wait --no-progress --reason "two-GPU drain" &
sweep=$!
for i in $(seq 60); do python3 -m calib status 2>/dev/null | grep -q fleet-x2 && break; sleep 1; done
CUDA_VISIBLE_DEVICES=0 python3 -m calib worker --backend cupy --exit-when-empty --lease-timeout-s 120 &
w0=$!
CUDA_VISIBLE_DEVICES=1 python3 -m calib worker --backend cupy --exit-when-empty --lease-timeout-s 120 &
w1=$!
wait $sweep $w0 $w1  # not a bare wait: that would also wait for the tee above
python3 -m calib status
python3 - <<'PY'
import sqlite3
from calib.store import Store
from calib.calibrations import memory_bandwidth as dram
db = sqlite3.connect("/tmp/fleet.sqlite")
print("jobs by GPU and state:", db.execute("SELECT gpu_id, state, count(*) FROM job GROUP BY gpu_id, state").fetchall())
print("results by GPU and role:", db.execute("SELECT j.gpu_id, r.role, count(*) FROM result r JOIN job j ON j.id = r.job_id "
                                             "GROUP BY j.gpu_id, r.role").fetchall())
store = Store("sqlite:////tmp/fleet.sqlite", readonly=True)
frame = store.frame(1)
for gpu, part in frame.groupby("gpu_id"):
    recs = dram.fit(part).records
    for name in ("memory.dram.read_bandwidth_gbps", "memory.dram.copy_bandwidth_gbps"):
        r = recs.get(name)
        print(f"GPU {gpu}: {name} = {r['value']:.0f} GB/s, CI {r['ci95'][0]:.0f}..{r['ci95'][1]:.0f}, n={r['n']}"
              if r else f"GPU {gpu}: {name}: too few points on this GPU")
PY
cp /tmp/fleet.sqlite $OUT/fleet.sqlite
