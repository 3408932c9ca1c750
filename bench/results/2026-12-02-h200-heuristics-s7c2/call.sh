#!/usr/bin/env bash
# session 7 call 2: evaluations of seeds 23-25 (probed in call 1), unseen
GPU_TESTS_TIMEOUT=1 DEADLINE_S=560 bash bench/device_run.sh heuristics-seed23 heuristics-seed24 heuristics-seed25
