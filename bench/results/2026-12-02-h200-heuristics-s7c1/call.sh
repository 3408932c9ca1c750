#!/usr/bin/env bash
# session 7 call 1: Lt probes for seeds 19-25, then evaluations of seeds 19-22 and the GPU tests
# (as run: .snap/split1.json and .snap/batched.json are this folder's shapes-split1.json and shapes-batched.json)
export PYTHONPATH=$PWD
timeout 30 python3 bench/probes.py cublaslt-heuristics .snap/split1.json $OUT/cublaslt-s7c1.json > $OUT/cublaslt-s7c1.txt 2>&1
timeout 40 python3 bench/probes.py cublaslt-batched $OUT/cublaslt-batched-s7c1.json .snap/batched.json > $OUT/cublaslt-batched-s7c1.txt 2>&1
echo "probes: $SECONDS s"
GPU_TESTS_TIMEOUT=1 DEADLINE_S=$((575 - SECONDS)) bash bench/device_run.sh heuristics-seed19 heuristics-seed20 heuristics-seed21 heuristics-seed22 gpu-tests
ls -la $OUT
