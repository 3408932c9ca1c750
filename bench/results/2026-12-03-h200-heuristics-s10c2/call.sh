#!/usr/bin/env bash
# session 10 call 3: evaluations of seeds 29-31, unseen, with the driver's register counts deciding launches
GPU_TESTS_TIMEOUT=1 DEADLINE_S=420 bash bench/device_run.sh heuristics-seed29 heuristics-seed30 heuristics-seed31
