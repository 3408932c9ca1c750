#!/usr/bin/env bash
# session 10 call 1: evaluations of seeds 26-28, unseen (the probe in this call failed: RawKernel has no .ptr)
(export PYTHONPATH=$PWD; timeout 150 python3 bench/probes.py norm-registers $OUT/norm-registers.json > $OUT/norm-registers.txt 2>&1)
GPU_TESTS_TIMEOUT=1 DEADLINE_S=400 bash bench/device_run.sh heuristics-seed26 heuristics-seed27 heuristics-seed28
# session 10 call 2: the probe, fixed (cupy.RawKernel.num_regs / local_size_bytes / max_threads_per_block)
export PYTHONPATH=$PWD; timeout 200 python3 bench/probes.py norm-registers $OUT/norm-registers.json > $OUT/norm-registers.txt 2>&1
