#!/usr/bin/env bash
# session 11 call 2: evaluations of seeds 35-37, unseen, with split-K's fp16 split-1 correction and the
# learned predictor's bands (the notebook wheels moved out of .whl: the tree is 58 MB)
GPU_TESTS_TIMEOUT=1 DEADLINE_S=560 bash bench/device_run.sh heuristics-seed35 heuristics-seed36 heuristics-seed37
