"""fp32 split 1 as the kernel cuBLASLt names for it (calib/heuristics/cublaslt.py): that kernel's tile
and split in the model's configuration time, CUTLASS's swizzled grid, whole waves where the grid is
resident, the serial reduction inside the xmma kernels, the small-grid splitKreduce, and the per-kernel
factors fitted on the traced kernels.
"""

from __future__ import annotations

import math
import statistics

from .gemm import INTERNAL_SPLIT_US, LAUNCH_US, _config_us, _setup
from .split1_tree import LAUNCH_GAP_US, _two_pass


# cuBLAS's fp32 split 1 from the kernel it will run (calib/heuristics/cublaslt.py: Lt's first
# result, which cuBLAS's gemm executed for 455/455 fp32 GEMMs of recordings A-L; H200, 2026-12-02,
# bench/results/2026-12-02-h200-cublaslt/). That tile and split in this model's own configuration
# time (:func:`_config_us`), against the traced kernels + LAUNCH_GAP_US (kernels.json, the same 455):
# median |error| 9.3%, 0.42-1.74x (the fastest configuration: 6.9%, 0.53-1.87x). What the rest
# misses is regular:
# - CUTLASS's SIMT kernels (Lt algo 20, "cutlass_80_simt_sgemm") swizzle their grid, x = m tiles *
#   2^L, y = ceil(n tiles / 2^L), L = min(3, round(log2(n tiles))) (the traced grid for 284 of the
#   318 algo-20 launches). Where that grid fits the SMs' resident slots at once (Lt's wavesCount is
#   the real CTAs over those slots) the idle CTAs cost as much as real ones: counted there, the
#   1.3-1.74x cases (1168x288x3328 1.74, 64x1056x19200 1.63: grid 8x2 where 9 tiles) fall to at most
#   1.24 (all 455: 0.42-1.24x); counted everywhere, multi-round grids fall to 0.54-0.61x
#   (2768x2208x512, 288x1408x22784);
# - the kernels then run at a fraction of the model's time (:data:`LT_KERNEL_FACTOR`: the median of
#   traced / predicted per Lt algo id and, with at least LT_FACTOR_MIN_SHAPES shapes, per algo and
#   tile; algo 55 is the sm80 xmma SIMT kernels). An algo id never seen falls back to the fastest
#   configuration;
# - where the whole grid is resident at once (404 of the 455: its CTAs within Lt's slots, as
#   above), the waves are whole (LT_WHOLE_WAVES): CUTLASS's 128-thread tiles of F's 320x560x2304,
#   H's 1168x288x3328 and I's 64x544x42496 launch 400-416 CTAs on 132 SMs, so the busiest SM holds
#   4 where the fraction says 3.0-3.2, and their traced kernels ran 1.14-1.26x the fractional time
#   (45.1, 128.5 and 152.7 us; 0.96-0.97x with whole waves). With them (factors refitted:
#   fit_lt_factors) median |error| 5.3 -> 4.9% over the 455, p5-p95 0.86-1.23 -> 0.87-1.26x,
#   0.50-1.46 -> 0.52-1.49x in all (528x16x15616, 1.49x). Where the grid takes several rounds the
#   scheduler hands CTAs to SMs as they free, and the fraction stays.
LT_SWIZZLED_ALGOS = (20,)
LT_FACTOR_MIN_SHAPES = 10
KERNELS_FILE = "bench/results/2026-12-02-h200-splitk-kernels/kernels.json.gz"
LT_PROBE_FILE = "bench/results/2026-12-02-h200-cublaslt/cublaslt.json.gz"
# fit_lt_factors(kernels.json, load_probe(cublaslt.json.gz), the profile of splitk_fp32_split1.json), with
# the reduction of lt_reduce_us (before it: "20" 0.944, "20:128x32" 0.973, "20:32x128" 1.003, "20:64x64" 0.907)
LT_KERNEL_FACTOR = {"20": 0.931, "20:128x128": 0.981, "20:128x256": 0.958, "20:128x32": 0.966, "20:128x64": 0.907,
                    "20:256x128": 0.953, "20:32x128": 0.978, "20:64x128": 0.897, "20:64x64": 0.904,
                    "55": 0.804, "55:128x32": 0.77, "55:32x32": 0.732, "55:32x64": 0.755, "55:64x128": 0.835,
                    "55:64x64": 0.823}


def lt_ctas(m: int, n: int, c) -> int:
    """The CTAs the kernel of Lt choice ``c`` launches that cost time (see above)."""
    mt, nt = math.ceil(m / c.tile_m), math.ceil(n / c.tile_n)
    real = mt * nt * c.split
    if c.algo_id not in LT_SWIZZLED_ALGOS or c.waves <= 0:
        return real
    lg = min(3, round(math.log2(nt)))
    grid = mt * 2**lg * math.ceil(nt / 2**lg) * c.split
    return grid if grid <= real / c.waves else real


LT_WHOLE_WAVES = True  # the change of the comment above; False gives the fractional waves of 6148d09


def lt_resident(m: int, n: int, c) -> bool:
    """Whether every CTA the kernel of Lt choice ``c`` launches is resident at once (Lt's wavesCount
    is the real CTAs over the SMs' resident slots)."""
    real = math.ceil(m / c.tile_m) * math.ceil(n / c.tile_n) * c.split
    return LT_WHOLE_WAVES and c.waves > 0 and lt_ctas(m, n, c) <= real / c.waves


def _lt_plain_us(q, m: int, n: int, k: int, c) -> float:
    """The kernel of Lt choice ``c`` in this model's configuration time. Where its whole grid is
    resident at once, the SMs share out the CTAs and the launch ends when the busiest SM, holding
    ceil(CTAs / SMs), is done: whole waves, not the fraction (LT_WHOLE_WAVES). Its split's reduction:
    :func:`lt_reduce_us`, or the serial chain of :func:`serial_chain_us` where that is longer."""
    setup = _setup(q, m, n, k, 4, 4, "simt", 1)
    reduce_us = max(lt_reduce_us(m, n, c.split), serial_chain_us(c))
    return LAUNCH_US["simt"] + _config_us(setup, m, n, k, "simt", c.tile_m, c.tile_n, c.split, ctas=lt_ctas(m, n, c),
                                          whole_waves=lt_resident(m, n, c), reduce_us=reduce_us)


# The sm80 xmma kernels (Lt algo 55) with custom option 1 reduce their split of K inside the launch,
# one partial after another: traced on the H200 (2026-12-02, session 6 call 1, kernels-s6c1.json), fp32
# 16x80xK ran Lt's 32x32 tile split 176 ways (grid 1x3x176) in 25.9-26.0 us and 16x96x512 and 16x144xK
# its 32x128 tile split 264 ways in 49.6-52.0 us, for every K of 256-1024: the time is the split's, not
# K's (R's 16x80x768 ran 28.5 us in its evaluation, where the reduction charged at most 8.7). Per partial
# a fixed step and a share per element of the tile, the two read off the two tiles (fit_serial_chain:
# the chain's time over the kernel factor, less the launch and the K loop, per partial: 0.197-0.199 us
# for the 32x32 tile, 0.231-0.241 for the 32x128). Custom option
# 0 reduces in a second launch (56 of 59 traced, splits 3-66: the second launch 2.7-17.5 us) and 2
# (23 traced, splits 2-33, all of more than 128 rows) showed no chain beyond the model's reduction.
SERIAL_ALGO, SERIAL_CUSTOM_OPTION = 55, 1
SERIAL_STEP_US, SERIAL_US_PER_ELEMENT = 0.185, 1.29e-5  # fit_serial_chain(kernels-s6c1.json, ...)
SERIAL_MIN_SPLIT = 64  # the fit's shapes: splits where the chain is most of the time


def serial_chain_us(c, step_us: float = None, us_per_element: float = None) -> float:
    """The serial reduction of Lt choice ``c``'s split inside its kernel (0 for any other kernel): the split
    times (SERIAL_STEP_US + the tile's elements x SERIAL_US_PER_ELEMENT)."""
    if c.algo_id != SERIAL_ALGO or getattr(c, "custom_option", 0) != SERIAL_CUSTOM_OPTION or c.split <= 1:
        return 0.0
    step = SERIAL_STEP_US if step_us is None else step_us
    per = SERIAL_US_PER_ELEMENT if us_per_element is None else us_per_element
    return c.split * (step + per * c.tile_m * c.tile_n)


def fit_serial_chain(kernels: dict, choices: dict, q) -> tuple:
    """(SERIAL_STEP_US, SERIAL_US_PER_ELEMENT): the least-squares line of each traced shape's chain per
    partial on its tile's elements, over the shapes (``kernels``: "MxNxK" -> launches, as kernels.json)
    whose Lt choice (``choices``: cublaslt.load_probe) is a serial kernel split at least SERIAL_MIN_SPLIT
    ways. A shape's chain: its traced time plus LAUNCH_GAP_US over the choice's kernel factor, less the
    launch and the configuration's time without a reduction."""
    pts = []
    for key, launches in sorted(kernels.items()):
        m, n, k = (int(v) for v in key.split("x"))
        c = choices.get((m, n, k, "float32"))
        if c is None or serial_chain_us(c) == 0.0 or c.split < SERIAL_MIN_SPLIT:
            continue
        t = statistics.fmean(float(x["dur_us"]) for x in launches) + LAUNCH_GAP_US
        f = LT_KERNEL_FACTOR.get(_factor_key(c), LT_KERNEL_FACTOR[str(c.algo_id)])
        setup = _setup(q, m, n, k, 4, 4, "simt", 1)
        rest = LAUNCH_US["simt"] + _config_us(setup, m, n, k, "simt", c.tile_m, c.tile_n, c.split,
                                              ctas=lt_ctas(m, n, c), whole_waves=lt_resident(m, n, c), reduce_us=0.0)
        pts.append((c.tile_m * c.tile_n, (t / f - rest) / c.split))
    mx, my = statistics.fmean(x for x, _ in pts), statistics.fmean(y for _, y in pts)
    per = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    return my - per * mx, per


# cuBLASLt's splitKreduce_kernel<32, 16, ...> (a 32x16-thread CTA per 512 elements of C) adds the split's
# partials one after another in each thread: where its grid is small it is a chain of z loads, not a
# stream of bytes. In the 44 traced fp32 GEMMs of A-L whose reduction ran at most 8 CTAs (C of at most
# 4096 elements; H200, 2026-12-02, kernels.json), it took 1.41 + 0.0328 us per partial (least squares;
# z = 8-132: 1.6-1.9 us at z <= 16, 5.3-6.0 us at z = 128-132), where INTERNAL_SPLIT_US charges any split
# the same. So the choice's time charges that slope from LT_REDUCE_REF_SPLIT, the split of the FP32
# floor's 16x16x2560 (z = 36) that INTERNAL_SPLIT_US was read off. Left out one seed at a time (A-R,
# the slope and LT_KERNEL_FACTOR refitted without the seed's shapes, slope 0.0324-0.0330), with both Lt
# probes as oracle, the held-out memory-bound medians fell on 8 recordings and rose on none (B 4.94 ->
# 4.92%, E 5.41 -> 5.23, F 4.09 -> 3.88, G 5.21 -> 5.07, H 4.42 -> 4.41, I 4.35 -> 4.32, J 4.08 -> 3.95,
# L 4.82 -> 4.60), every geomean and worst case unchanged; Q and R replay without Lt (no probe of their
# shapes), so only a GPU run moves them. Larger grids stream the partials, which was tried as traffic
# (INTERNAL_SPLIT_US's comment) and not kept.
LT_REDUCE_US_PER_SPLIT = 0.0328  # fit_reduce_slope(kernels.json)
LT_REDUCE_REF_SPLIT = 36
REDUCE_ELEMENTS_PER_CTA, REDUCE_SMALL_GRID_CTAS = 512, 8


def lt_reduce_us(m: int, n: int, split: int) -> float:
    """cuBLAS's internal split's reduction (its kernel and launch) for Lt's split ``split``: INTERNAL_SPLIT_US,
    plus LT_REDUCE_US_PER_SPLIT per partial from LT_REDUCE_REF_SPLIT where its grid is small."""
    if split <= 1 or math.ceil(m * n / REDUCE_ELEMENTS_PER_CTA) > REDUCE_SMALL_GRID_CTAS:
        return INTERNAL_SPLIT_US
    return INTERNAL_SPLIT_US + LT_REDUCE_US_PER_SPLIT * (split - LT_REDUCE_REF_SPLIT)


def fit_reduce_slope(kernels: dict, exclude=()) -> float:
    """LT_REDUCE_US_PER_SPLIT: the least-squares slope of the traced splitKreduce time (median of a shape's
    launches) on the main kernel's grid z, over the shapes whose reduction grid is at most
    REDUCE_SMALL_GRID_CTAS CTAs, less the shapes in ``exclude``."""
    pts = []
    for key, launches in sorted(kernels.items()):
        if tuple(int(v) for v in key.split("x")) in exclude:
            continue
        red = [x for x in launches if "splitKreduce" in x["name"]]
        main = [x for x in launches if "splitKreduce" not in x["name"]]
        if red and math.prod(red[0]["grid"]) <= REDUCE_SMALL_GRID_CTAS:
            pts.append((main[0]["grid"][2], statistics.median(float(x["dur_us"]) for x in red)))
    mx, my = statistics.fmean(z for z, _ in pts), statistics.fmean(t for _, t in pts)
    return sum((z - mx) * (t - my) for z, t in pts) / sum((z - mx) ** 2 for z, _ in pts)


def _factor_key(c) -> str:
    return f"{c.algo_id}:{c.tile_m}x{c.tile_n}"


def choice_us(q, m: int, n: int, k: int, c, factors=None) -> float | None:
    """fp32 split 1 as the kernel of Lt choice ``c`` (a cublaslt.Choice), or None for an algo the
    factors were never measured on."""
    factors = LT_KERNEL_FACTOR if factors is None else factors
    f = factors.get(_factor_key(c), factors.get(str(c.algo_id)))
    return None if f is None else f * _lt_plain_us(q, m, n, k, c)


def fit_lt_factors(kernels: dict, choices: dict, q, exclude=()) -> dict:
    """:data:`LT_KERNEL_FACTOR` from traced kernels (kernels.json) and Lt's choices for the same
    shapes (cublaslt.load_probe), less the shapes in ``exclude`` (a held-out seed's)."""
    ratios: dict = {}
    for key, launches in kernels.items():
        m, n, k = (int(v) for v in key.split("x"))
        c = choices.get((m, n, k, "float32"))
        if c is None or (m, n, k) in exclude:
            continue
        n_calls = sum("splitKreduce" not in x["name"] for x in launches) / (2 if _two_pass(launches) else 1)
        r = (sum(float(x["dur_us"]) for x in launches) / n_calls + LAUNCH_GAP_US) / _lt_plain_us(q, m, n, k, c)
        ratios.setdefault(str(c.algo_id), []).append(r)
        ratios.setdefault(_factor_key(c), []).append(r)
    return {key: round(statistics.median(v), 3) for key, v in sorted(ratios.items())
            if ":" not in key or len(v) >= LT_FACTOR_MIN_SHAPES}


def lt_choice(q, m: int, n: int, k: int, dtype: str):
    """cuBLASLt's choice for this GEMM on the profile's GPU (calib.heuristics.cublaslt), or None.
    Imported here, on the first fp32 split-1 prediction, so ``import calib`` never loads it."""
    from .. import cublaslt

    return cublaslt.choice(m, n, k, dtype, getattr(q, "device_name", None))
