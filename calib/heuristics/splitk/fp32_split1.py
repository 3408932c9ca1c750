"""fp32 split 1's time: the plain model with its traced-kernel correction, raised or lowered to the
time of the kernel cuBLASLt names where the output's rows and the profile's fp32 ridge say so.
"""

from __future__ import annotations

import math

from .. import predictor as P
from .gemm import SIMT_32_ROWS_UP_TO, gemm_us
from .lt_kernel import choice_us, lt_choice
from .problem import RATE, flops_per_byte
from .split1_tree import split1_log_factor


def fp32_ridge_flops_per_byte(q) -> float:
    """The profile's fp32 ridge: its FMA peak over its DRAM read bandwidth (14.1-14.6 flop per byte
    in the profiles of recordings A-P, H200, 2026-12-01/02)."""
    peak = q(RATE["float32"], P.DEFAULTS.get(RATE["float32"], 100.0)) * 1e12
    return peak / (P.dram_gbps(q, "read", 16) * 1e9)


# Outputs of at most this many rows take the choice's time below the ridge too, and outputs of
# SIMT_32_ROWS_UP_TO rows or fewer (but more than this) not even above it. The plain model's 32-row
# SIMT tiles were fitted on 32- and 48-row outputs (SIMT_NARROW_EFFICIENCY, SIMT_32_ROWS_UP_TO: their
# split-1 times), where the per-tile factors of the choice come mostly from taller ones; a 16-row
# output fills half of each 32-row tile, which no constant was fitted on. On the fp32 split-1
# problems of A-O (H200, both probes as oracle, whole waves; counted per recording) where the choice
# is above the plain time, median |log(measured / predicted)| plain vs raised: 16-row outputs below
# the ridge 0.062 vs 0.054 (53 problems; M's 16x2688x768 ran 1.55x the plain time, 0.96x the
# choice's), 17-48 rows above it 0.074 vs 0.118 (34; M's 32x4896x4096 ran 0.86x the choice's), more
# than 48 rows above it 0.059 vs 0.037 (263), below it 0.047 vs 0.067 (51). The rule was read off
# these groups (not chosen per fold); replayed, it changes one worst case (M 0.685 -> 0.795, also
# with the factors and split-1 tree left out per seed) and the memory-bound medians of six
# recordings (A 4.79 -> 4.50%, B 5.32 -> 4.94%, J 4.26 -> 4.08%, N 4.711 -> 4.705%; F 3.64 -> 4.09%,
# I 4.32 -> 4.35%).
CHOICE_BELOW_RIDGE_ROWS_UP_TO = 16
# What the raise could not catch, live on seed 14 (recording R, H200, 2026-12-02, session 5 call 4):
# fp32 16x80x768 split 1 ran 28.5 us, predicted 9.68 (the plain model: Lt's live first result there
# timed at most that; split 4 ran 12.5). Traced since (session 6 call 1), Lt's choice is the xmma 32x32
# tile split 176 ways, which reduces its partials one after another inside the launch: the chain of
# serial_chain_us, without which no shape rule names it (the other 32 recorded fp32 outputs of at most
# 64x256 with K <= 2560, A-R, ran 7.5-13.1 us). tests/test_heuristics_splitk_seed14.py pins the data.


# Outputs of more than 32 rows but at most SIMT_32_ROWS_UP_TO, above the ridge, take the choice's time
# where it is below the plain one: the plain model gives them two 32-row tiles, while Lt names its 64-row
# tiles for them (64x128 or 64x64 for all 12 such problems of A-V). There the choice was the closer of
# the two for 12 of 12 (I's 48x496x22016 ran 42.5 us, plain 61.5, the choice 40.4; K's 48x144x28928 32.5,
# 41.1 and 29.2; H200, 2026-12-02, every split-1 probe as oracle); for the 15 32-row outputs where the
# choice is below, both were below the measured time in 11, the choice further, so they keep the plain
# time. Lowering below the ridge too moved the memory-bound median of D 5.15 -> 6.17% and P 5.25 -> 6.61%.
LOWERED_ROWS_ABOVE = 32


def raised_by_choice(q, m: int, n: int, k: int) -> bool:
    """Whether fp32 split 1 is raised to the choice's time (see CHOICE_BELOW_RIDGE_ROWS_UP_TO)."""
    if m <= CHOICE_BELOW_RIDGE_ROWS_UP_TO:
        return True
    return m > SIMT_32_ROWS_UP_TO and flops_per_byte(m, n, k, 4) >= fp32_ridge_flops_per_byte(q)


def split1_fp32_us(q, m: int, n: int, k: int) -> float:
    """fp32 split 1: the fastest configuration with the traced-time correction
    (:func:`split1_log_factor`), raised to the time of the kernel cuBLAS will run where Lt's choice
    is known (:func:`choice_us`).

    Only raised: the worst cases were cuBLAS running a slower kernel than the fastest one, which the
    choice reveals; where the choice's time is below, it is mostly the floor of few-tile problems
    (16x736x256, 64x64 tile split 4: recorded 8.5 us, 7.2 from the choice, 8.5 from the plain
    model), which the plain model and its correction were fitted on. Replayed on A-L (H200,
    2026-12-02, the choices of bench/results/2026-12-02-h200-cublaslt/cublaslt.json.gz), the choice
    alone lifted C/D's worst case 0.88 -> 0.90 but raised the memory-bound predictor median on 9 of
    12 recordings (F 3.6 -> 6.3%, I 4.3 -> 6.2%); raised only, it kept the worst cases it lifted
    (F 0.712 -> 0.756, L 0.735 -> 0.894) and the memory-bound median rose on four (I 4.3 -> 5.1%).

    Only above the profile's fp32 ridge (:func:`fp32_ridge_flops_per_byte`): below it the kernel's time
    is moving its bytes (or, for the smallest, its fixed costs) more than its tile's flops, which is
    what the choice's tile and split describe, and the choice's time was the worse guess there. On the
    fp32 split-1 problems of A-O (the oracles of the H200 probes, cublaslt.json.gz and
    cublaslt-s4c4.json) where the choice is above the plain time, |log(measured / predicted)| has
    median 0.057 plain and 0.074 raised below the ridge (122 problems, the choice closer in 62),
    0.059 and 0.049 above it (308, closer in 173; counted per recording, so A and B's shared
    problems, and C and D's, twice). Raised above the ridge only, every recording's
    geomean and worst case is as with the raise everywhere (F 0.756, L 0.894) and its memory-bound
    median as without the raise (I 5.1 -> 4.3%, B 5.5 -> 5.3%, F 4.2 -> 3.6%), since the ridge is above
    the descriptor's memory-bound line (12 flop per byte) in every profile; H, J and L give back
    the raise's memory-bound gains (4.0 -> 4.4%, 4.1 -> 4.3%, 4.6 -> 4.8%).

    Those numbers are of the fractional waves. With whole waves where the grid is resident
    (LT_WHOLE_WAVES), replayed on A-O with both probes as oracle, geomean / worst F 0.992/0.756 ->
    0.993/0.858, H 0.993/0.760 -> 0.996/0.845, O 0.996/0.796 -> 0.997/0.872, I 0.997/0.820 ->
    0.996/0.754, M 0.989 -> 0.988 (worst 0.685), the others unchanged; every memory-bound median as
    without the raise. With 16-row outputs raised below the ridge too and 32/48-row ones not above
    it (:func:`raised_by_choice`), M 0.988/0.685 -> 0.992/0.795. I falls on the batched side:
    split 1 (64x544x42496) is now predicted 167 us (ran 161; was 142, which the 0.84 margin kept),
    and split 16, predicted 120, ran 175.

    Which problems are raised is :func:`raised_by_choice`: the ridge, except that 16-row outputs
    are raised below it too and 32- and 48-row outputs not above it. Outputs of 33-48 rows above the
    ridge take the choice's time where it is lower (LOWERED_ROWS_ABOVE)."""
    t = gemm_us(q, m, n, k, 4, 4, "simt") * math.exp(split1_log_factor(q, m, n, k))
    c = split1_fp32_choice(q, m, n, k)
    t_choice = None if c is None else choice_us(q, m, n, k, c)
    if t_choice is None:
        return t
    return max(t, t_choice) if raised_by_choice(q, m, n, k) else min(t, t_choice)


def lowered_by_choice(q, m: int, n: int, k: int) -> bool:
    """Whether fp32 split 1 is lowered to the choice's time (see LOWERED_ROWS_ABOVE)."""
    return LOWERED_ROWS_ABOVE < m <= SIMT_32_ROWS_UP_TO and flops_per_byte(m, n, k, 4) >= fp32_ridge_flops_per_byte(q)


def split1_fp32_choice(q, m: int, n: int, k: int):
    """Lt's choice for fp32 split 1 where the model reads it (raised or lowered to its time), else None:
    the one place that decides when Lt is asked about split 1."""
    if not (raised_by_choice(q, m, n, k) or lowered_by_choice(q, m, n, k)):
        return None
    return lt_choice(q, m, n, k, "float32")
