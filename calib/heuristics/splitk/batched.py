"""Split s > 1's strided-batched FP32 GEMM from the kernel cuBLASLt names for it (cuBLAS's gemmSN, or a
tiled kernel), the fit of its constants on the traced batched kernels, and the fallback to the fastest
SIMT configuration.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from .. import predictor as P
from ..knobs import Knobs
from . import lt_kernel
from .gemm import STEP_NS, _setup, _tile_efficiency, gemm_us
from .lt_kernel import LT_FACTOR_MIN_SHAPES, LT_SWIZZLED_ALGOS, _factor_key
from .problem import RATE, SplitKDescriptor


# Split s > 1's strided-batched FP32 GEMM from the kernel cuBLAS runs for it (H200, 2026-12-02,
# bench/results/2026-12-02-h200-splitk-batched/: device call s5c1 at a8f8206 asked cuBLASLt for the
# 571 fp32 (shape, split) pairs of A-P within 1.3x of their best, as CuPy hands them over, and traced
# 290 of them as splitk.GpuCase.run runs them; call s5c2 at 7365cae traced the other 281 and asked Lt
# for all 2416 recorded fp32 splits, --all). Lt's first result named the traced kernel in 571 of 571:
# algo 11 (no tile; cuBLAS's small-N gemmSN_NN_kernel, grid ceil(N/64) x 4 x split) for 78 of the
# 121 16-row outputs, the sm80 xmma SIMT kernels (algo 55, 408 pairs) and CUTLASS's (algo 20, 85)
# for the rest. The fastest-SIMT-configuration model (gemm_us, batch = split) misses those kernels by
# a median |log((traced + BATCHED_GAP_US) / predicted)| of 0.089 (p10-p90 0.90-1.27x; 0.148 on the
# 16-row outputs), worst in the groups of issue 14: 16-row outputs overpredicted (gemmSN, not the
# 32-row tile the model pads them into) and a few CTAs with a long K underpredicted. Timed as the
# named kernel: 0.043 (0.93-1.12x; 16-row 0.071); left out one seed at a time (A-P, seeds 0-12,
# every constant below refitted without the seed's shapes) 0.089 -> 0.044 on the held-out pairs,
# lower on every seed. (On the first 290 alone, before s5c2: 0.130 -> 0.054.)
# - gemmSN (algo 11): each CTA takes 64 columns of C and a quarter of its rows over the whole K slice;
#   a fixed cost (SN_FLOOR_US), then the SM's CTAs share its issue rate (the busiest SM's CTAs, in
#   fractional waves, at SN_EFFICIENCY of the SM's share of the FP32 peak: 16x3488x12544 ran 117-129
#   us at splits 2-32, 440-7040 CTAs, about 11 TFLOPS of padded flops), or one CTA is bound by
#   SN_STEP_NS per element of K (16x16x10240 split 32, 128 CTAs of K 320: 6.7 us);
# - algos 55 and 20: the named tile's CTAs (CUTLASS's swizzled grid as for split 1, the batch as z).
#   Where the grid is resident at once the busiest SM's CTAs share its issue rate while their K-loop
#   latencies overlap: max(ceil(CTAs / SMs) x one CTA's flops time, one CTA's STEP_NS latency), each
#   with a fitted factor (BATCHED_FACTOR: rate, step), per algo and tile with at least
#   LT_FACTOR_MIN_SHAPES traced pairs, else per algo. The xmma 32x64 tile on 16-row outputs shows
#   why: 3 CTAs per SM ran 20-25 ns per K per CTA-slot, 4-24 CTAs 15-16 (16x6144x6656: split 4, 8,
#   32 ran 99.8, 77.1, 80.6 us), a latency floor then a rate; waves times the larger (gemm_us) says
#   neither. An algo never traced, or a tile Lt does not name, falls back to gemm_us.
# Each traced kernel is compared with its prediction, plus BATCHED_GAP_US: the median of (recorded
# time - the model's copy and splitk_sum - the traced GEMM) over the 571 traced pairs' recordings
# (the GEMM's launch gap in the three-kernel sequence; 2.64 us over the first 290).
BATCHED_PROBE_FILE = "bench/results/2026-12-02-h200-splitk-batched/cublaslt-batched-all.json.gz"
BATCHED_KERNELS_FILES = ("bench/results/2026-12-02-h200-splitk-batched/splitk-batched-kernels-0.json.gz",
                         "bench/results/2026-12-02-h200-splitk-batched/splitk-batched-kernels-1.json.gz")
# Used everywhere but for tiled grids that are resident at once with at most one CTA per SM, which fall
# back to the fastest configuration. With every recorded split probed, the replay (both Lt probes as
# oracle, margin 0.84) with the choice everywhere raises or keeps every recording's worst case but I's,
# which falls 0.754 -> 0.511 (A 0.828 -> 0.907, B 0.840 -> 0.931, C 0.878 -> 0.905, D 0.887 -> 0.908,
# F 0.858 -> 0.925, J 0.711 -> 1.000, O 0.872 -> 0.914). I's 48x496x22016 split 16 is such a grid (55's
# 64x64 tile, 128 CTAs on 132 SMs, untraced), predicted 0.823x split 1 where it ran 1.96x it; the three
# traced one-CTA-per-SM 64x64 pairs ran 1.36-1.7x the model too: its step factor (0.5, the grid's edge)
# is set by the grids that are not resident, where a wave's CTAs overlap their latency, and nothing was
# fitted on a lone CTA per SM. Without those grids (and with split 1 of 33-48-row outputs lowered to
# the choice, LOWERED_ROWS_ABOVE), replayed with every probe on A-V (H200, 2026-12-02), every worst case
# rises or stays; see tests/test_heuristics_splitk_serial.py for the table.
def choice_times_batched(q, m: int, n: int, batch: int, c) -> bool:
    """Whether Lt choice ``c``'s kernel times the batched GEMM (see above): gemmSN always, a tiled
    kernel unless its grid is resident at once with at most one CTA per SM."""
    if c.algo_id == SN_ALGO:
        return True
    ctas, resident = lt_batched_ctas(m, n, batch, c)
    return not (resident and ctas <= P.sm_count(q))
SN_ALGO = 11
SN_COLUMNS, SN_ROW_PARTS = 64, 4  # gemmSN's grid: ceil(N / 64) x 4 x batch (78 of 78 traced)
# fit_batched(...) on the traced kernels above (see test_heuristics_splitk_batched.py)
BATCHED_GAP_US = 2.33
SN_EFFICIENCY, SN_STEP_NS, SN_FLOOR_US = 0.17, 12.0, 1.75
# gemmSN's CTAs in fractional waves: median |log error| 0.052 over its 78 traced pairs, 0.065 whole
SN_WHOLE_WAVES = False
BATCHED_FACTOR = {"20": (1.0, 1.2), "20:128x256": (0.98, 0.5), "20:32x128": (1.06, 1.2), "55": (0.86, 0.8),
                  "55:128x128": (0.96, 0.5), "55:128x64": (0.84, 1.1), "55:32x32": (0.74, 2.0), "55:32x64": (0.7, 1.9),
                  "55:64x128": (0.84, 0.5), "55:64x64": (0.94, 0.5)}


def load_batched_kernels(root=None) -> dict:
    """The traced batched kernels of BATCHED_KERNELS_FILES, one "shapes" mapping ("MxNxK/split" ->
    launches; the two device calls traced disjoint halves of the 571 pairs; stored gzip-compressed)."""
    from ..registry import HeuristicError, read_text

    root = Path(__file__).resolve().parents[3] if root is None else Path(root)
    shapes: dict = {}
    for f in BATCHED_KERNELS_FILES:
        shapes.update(json.loads(read_text(root / f, "traced batched kernels", HeuristicError))["shapes"])
    return shapes


def batched_choice(q, m: int, n: int, k_slice: int, batch: int):
    """cuBLASLt's choice for the batched GEMM on the profile's GPU (calib.heuristics.cublaslt), or None."""
    from .. import cublaslt

    return cublaslt.batched_choice(m, n, k_slice, batch, "float32", getattr(q, "device_name", None))


def _sn_terms(q, m: int, n: int, k_slice: int, batch: int) -> tuple:
    """gemmSN's costs before its constants: (waves on the busiest SM, one CTA's flops time at the whole
    SM's share of the FP32 peak, K, the operands' DRAM time, the epilogue)."""
    sms, _, dram, nbytes, from_dram, t_epilogue = _setup(q, m, n, k_slice, 4, 4, "simt", batch)
    rate_sm = q(RATE["float32"], P.DEFAULTS.get(RATE["float32"], 100.0)) * 1e6 / sms
    ctas = math.ceil(n / SN_COLUMNS) * SN_ROW_PARTS * batch
    waves = math.ceil(ctas / sms) if SN_WHOLE_WAVES else max(1.0, ctas / sms)
    t_flops = 2.0 * SN_COLUMNS * math.ceil(m / SN_ROW_PARTS) * k_slice / rate_sm
    return waves, t_flops, k_slice, nbytes * from_dram / dram, t_epilogue


def _sn_from_terms(terms: tuple, efficiency: float, step_ns: float, floor_us: float) -> float:
    waves, t_flops, k_slice, t_mem, t_epilogue = terms
    return floor_us + max(waves * t_flops / efficiency, step_ns * 1e-3 * k_slice, t_mem) + t_epilogue


def sn_kernel_us(q, m: int, n: int, k_slice: int, batch: int, efficiency: float = None,
                 step_ns: float = None, floor_us: float = None) -> float:
    """cuBLAS's gemmSN kernel for ``batch`` products (see BATCHED_GAP_US's comment), without the launch:
    its fixed cost (SN_FLOOR_US), then the busiest SM's CTAs at SN_EFFICIENCY of its share of the FP32
    peak, or one CTA's latency per K (SN_STEP_NS), or the operands from DRAM; plus the epilogue."""
    return _sn_from_terms(_sn_terms(q, m, n, k_slice, batch), SN_EFFICIENCY if efficiency is None else efficiency,
                          SN_STEP_NS if step_ns is None else step_ns, SN_FLOOR_US if floor_us is None else floor_us)


def lt_batched_grid(m: int, n: int, batch: int, c) -> int:
    """The CTAs Lt choice ``c``'s tiled kernel launches for ``batch`` products: its tiles, or CUTLASS's
    swizzled grid (as :func:`lt_ctas`), times the batch (the grid's z; all 212 traced tiled launches)."""
    mt, nt = math.ceil(m / c.tile_m), math.ceil(n / c.tile_n)
    if c.algo_id in LT_SWIZZLED_ALGOS:
        lg = min(3, round(math.log2(nt)))
        return mt * 2**lg * math.ceil(nt / 2**lg) * batch
    return mt * nt * batch


def lt_batched_ctas(m: int, n: int, batch: int, c) -> tuple:
    """(CTAs that cost time, whether the grid is resident at once) of Lt choice ``c``'s tiled kernel for
    ``batch`` products: as :func:`lt_ctas` and :func:`lt_resident` with the batch as the grid's z."""
    real = math.ceil(m / c.tile_m) * math.ceil(n / c.tile_n) * batch
    grid = lt_batched_grid(m, n, batch, c)
    resident = c.waves > 0 and grid <= real / c.waves
    return (grid if resident else real), (lt_kernel.LT_WHOLE_WAVES and resident)


def _batched_terms(q, m: int, n: int, k_slice: int, batch: int, c) -> tuple:
    """What the tiled kernel of Lt choice ``c`` costs before its two fitted factors: (CTAs on the
    busiest SM, one CTA's flops time at the tile's share of the SM's peak, one CTA's K-loop latency
    at STEP_NS, whether the grid is resident at once, the operands' DRAM time, the epilogue)."""
    sms, peak, dram, nbytes, from_dram, t_epilogue = _setup(q, m, n, k_slice, 4, 4, "simt", batch)
    ctas, resident = lt_batched_ctas(m, n, batch, c)
    rate_sm = peak * _tile_efficiency("simt", c.tile_m, c.tile_n) / sms
    t_flops = 2.0 * c.tile_m * c.tile_n * k_slice / rate_sm
    t_step = STEP_NS["simt"] * 1e-3 * (c.tile_m + c.tile_n) / 256 * k_slice
    waves = math.ceil(ctas / sms) if resident else max(1.0, ctas / sms)
    return waves, t_flops, t_step, resident, nbytes * from_dram / dram, t_epilogue


def _batched_from_terms(terms: tuple, rate_factor: float, step_factor: float) -> float:
    """A resident grid's CTAs share their SM: its issue rate bounds the busiest SM's CTAs together,
    while their K-loop latencies overlap (one CTA's, not one per wave); a grid of several rounds
    runs wave after wave, as :func:`_config_us` says."""
    waves, t_flops, t_step, resident, t_mem, t_epilogue = terms
    f, st = rate_factor * t_flops, step_factor * t_step
    t = max(waves * f, st) if resident else waves * max(f, st)
    return max(t, t_mem) + t_epilogue


def batched_choice_us(q, m: int, n: int, k_slice: int, batch: int, c, factors=None, sn=None) -> float | None:
    """The batched GEMM as the kernel of Lt choice ``c``: gemmSN (algo 11) or a tiled kernel with its
    (rate, step) factors, plus BATCHED_GAP_US; None where the model cannot time it (an algo never
    traced, no tile). ``factors``, ``sn`` (gap, efficiency, step): a fit's, else the shipped constants."""
    gap, eff, step, floor = (BATCHED_GAP_US, SN_EFFICIENCY, SN_STEP_NS, SN_FLOOR_US) if sn is None else sn
    if c.algo_id == SN_ALGO:
        return gap + sn_kernel_us(q, m, n, k_slice, batch, eff, step, floor)
    factors = BATCHED_FACTOR if factors is None else factors
    f = factors.get(_factor_key(c), factors.get(str(c.algo_id)))
    if f is None or min(c.tile_m, c.tile_n) < 1:
        return None
    return gap + _batched_from_terms(_batched_terms(q, m, n, k_slice, batch, c), *f)


def _traced_gemm_us(launches) -> float:
    """The mean traced time of the batched GEMM kernel in one (shape, split)'s launches (not the copy
    of At's slices, not splitk_sum)."""
    g = [float(x["dur_us"]) for x in launches
         if not x["name"].startswith("cupy_copy") and "splitk_sum" not in x["name"]]
    return sum(g) / len(g)


def _pairs(kernels: dict, exclude=()):
    for key, launches in sorted(kernels.items()):
        mnk, split = key.split("/")
        m, n, k = (int(v) for v in mnk.split("x"))
        if (m, n, k) not in exclude:
            yield m, n, k, int(split), launches


def _grid_fit(examples: list, fn, xs, ys) -> tuple:
    """The (x, y) of the grids ``xs`` by ``ys`` with the least summed squared log error of ``fn(example,
    x, y)`` against each example's target (``examples``: (example, target))."""
    best = None
    for x in xs:
        for y in ys:
            err = sum(math.log(target / fn(e, x, y)) ** 2 for e, target in examples)
            if best is None or err < best[0] - 1e-12:
                best = (err, x, y)
    return best[1], best[2]


RATE_GRID = [round(0.30 + 0.02 * i, 2) for i in range(61)]   # 0.30-1.50
STEP_GRID = [round(0.5 + 0.1 * i, 1) for i in range(56)]     # 0.5-6.0
SN_EFFICIENCY_GRID = [round(0.1 + 0.01 * i, 2) for i in range(21)]  # 0.10-0.30
SN_STEP_GRID = [4.0 + i for i in range(27)]                      # 4-30 ns
SN_FLOOR_GRID = [0.25 * i for i in range(13)]                    # 0-3 us


def fit_batched(kernels: dict, choices: dict, recorded: dict, q, exclude=()) -> dict:
    """BATCHED_GAP_US, SN_EFFICIENCY, SN_STEP_NS and BATCHED_FACTOR from traced batched kernels
    (``kernels``: a splitk-batched-kernels file's "shapes"), Lt's choices for them (cublaslt.load_probe
    of the batched probe) and the recorded times (``recorded``: (m, n, k, split) -> [us, ...]), less
    the shapes in ``exclude`` (a held-out seed's). The gap: the median of recorded - the model's copy and
    splitk_sum - the traced GEMM. The rest by least squares of log((traced + gap) / predicted) on grids:
    gemmSN's efficiency and step (SN_EFFICIENCY_GRID, SN_STEP_GRID); each tiled kernel's (rate, step)
    factors (RATE_GRID, STEP_GRID) per algo and, with at least LT_FACTOR_MIN_SHAPES pairs, per algo and
    tile."""
    from ..cublaslt import batched_key
    from .model import model_us  # the model reads this module's batched time (no cycle)

    pairs = [(m, n, k, s, _traced_gemm_us(ls), choices.get(batched_key(m, n, k // s, s)))
             for m, n, k, s, ls in _pairs(kernels, exclude)]
    gaps = []
    for m, n, k, s, g, _ in pairs:
        others = model_us(SplitKDescriptor(m, n, k, "float32"), Knobs(split=s), q) - batched_gemm_us(q, m, n, k // s, s)
        gaps += [us - others - g for us in recorded.get((m, n, k, s), [])]
    gap = round(statistics.median(gaps), 2)
    sn = [(_sn_terms(q, m, n, k // s, s), g + gap) for m, n, k, s, g, c in pairs
          if c is not None and c.algo_id == SN_ALGO]
    best = None
    for f in SN_FLOOR_GRID:
        e, st = _grid_fit(sn, lambda ex, x, y, f=f: gap + _sn_from_terms(ex, x, y, f), SN_EFFICIENCY_GRID, SN_STEP_GRID)
        err = sum(math.log(t / (gap + _sn_from_terms(ex, e, st, f))) ** 2 for ex, t in sn)
        if best is None or err < best[0] - 1e-12:
            best = (err, e, st, f)
    _, eff, step, floor = best
    groups: dict = {}
    for m, n, k, s, g, c in pairs:
        if c is None or c.algo_id == SN_ALGO or min(c.tile_m, c.tile_n) < 1:
            continue
        ex = (_batched_terms(q, m, n, k // s, s, c), g + gap)
        groups.setdefault(str(c.algo_id), []).append(ex)
        groups.setdefault(_factor_key(c), []).append(ex)
    factors = {key: _grid_fit(v, lambda e, x, y: gap + _batched_from_terms(e, x, y), RATE_GRID, STEP_GRID)
               for key, v in sorted(groups.items()) if ":" not in key or len(v) >= LT_FACTOR_MIN_SHAPES}
    return {"gap_us": gap, "sn_efficiency": eff, "sn_step_ns": step, "sn_floor_us": floor, "factors": factors}


def batched_from_choice_us(q, m: int, n: int, k_slice: int, batch: int, dtype: str = "float32") -> float | None:
    """Split s > 1's strided-batched GEMM from the kernel cuBLAS runs for it, where that is used (fp32, what
    was traced; :func:`choice_times_batched`) and the choice is known and timed; else None."""
    if dtype != "float32":
        return None
    c = batched_choice(q, m, n, k_slice, batch)
    if c is None or not choice_times_batched(q, m, n, batch, c):
        return None
    return batched_choice_us(q, m, n, k_slice, batch, c)


def batched_gemm_us(q, m: int, n: int, k_slice: int, batch: int, dtype: str = "float32") -> float:
    """Split s > 1's strided-batched GEMM: :func:`batched_from_choice_us` where it has a time, else the
    fastest SIMT configuration (:func:`gemm_us`)."""
    t = batched_from_choice_us(q, m, n, k_slice, batch, dtype)
    return gemm_us(q, m, n, k_slice, 4, 4, "simt", batch=batch) if t is None else t
