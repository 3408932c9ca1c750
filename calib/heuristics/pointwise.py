"""Pointwise (elementwise) kernels: ``y = op(a[, b])`` over ``n`` elements, and how to launch them.

Knobs, the ones a compiler's pointwise scheduler picks:

- ``vec``: elements per vector access (``vec * itemsize`` is the access width, 1..16 bytes);
- ``ept``: vectors per thread per iteration (loads issued before the first use: bytes in flight);
- ``block``: threads per block;
- ``grid``: ``"cover"`` (one pass, a grid sized to the data) or a number of blocks per SM
  (a persistent grid-stride loop).

The CuPy kernel (:data:`SOURCE`) is one template ``pointwise<T, VEC, EPT>`` with the op a runtime
argument (it keeps compiling to one module per data type; the switch costs each element a chain of
compares and branches, which the model counts); the ``n % vec`` remainder is done by scalar code.
Every candidate's output is compared with a float64 CuPy reference before it is timed.

The model (:func:`model_us`) is a launch floor, then the slowest of: the bytes at the bandwidth
of the memory level the working set sits in (L2 or DRAM) at the access width, combined with
Little's law over the thread slots (rounds of resident blocks or loop iterations, each a memory
latency, once per round in which the thread's loads go out, plus the thread's elements worked one
after another, which is what makes many elements per thread slow on small tensors); the block
scheduler's pace, after which the last block still does its work; and the issue slots of the
busiest SM, wave by wave (:func:`compute_us`: exp and sigmoid). Registers and load rounds are
facts of the compiled kernel; the few empirical constants come from the H200 evaluations of
2026-12-01 and -02 and say which data each is from. With ``hidden=True`` (the simulated device's
truth) the registers are the loaded vectors only, and it adds a cost per block scheduled and per
loop iteration.

The heuristic (:func:`heuristic`) ranks by the model, but a candidate with more than one vector
per thread, or a persistent grid on an L2-resident tensor, must beat the best-ranked one-vector
cover launch by the model's demonstrated error on that gap (:data:`EPT_MARGIN`,
:data:`STRIDE_MARGIN`, by memory level, measured on the recordings): on the H200, ept 2 and 4
lose on L2-sized fp32 and fp64 tensors by more than the model knows (see the note above
EPT_MARGIN), while the best ept-1 candidate is within 2% of the exhaustive best in 981 of the
1000 recorded problems and within 6% in all (geomean 0.998).
"""

from __future__ import annotations

import dataclasses
import math

from .._lazy import lazy
from . import predictor as P
from .knobs import COUNT, ITEMSIZE, FamilyDescriptor, Knobs, block_problem, check_output, require_cupy, vector_problem

np = lazy("numpy")

KIND = "pointwise"
FAMILY = "heuristics.pointwise"
BINARY = ("add", "mul", "maximum")
UNARY = ("relu", "exp", "sigmoid")
OPS = BINARY + UNARY
OP_CODE = {op: i for i, op in enumerate(OPS)}
DTYPES = ("float16", "float32", "float64")
EPTS = (1, 2, 4)
BLOCKS = (128, 256, 512)
GRIDS = ("cover", 4)
# What a launch of this family must name (knobs.check_knobs): an override or a user's choice
# is checked against it.
KNOB_VALUES = {"vec": COUNT, "ept": COUNT, "block": COUNT, "grid": ("cover", COUNT)}


def launch_problem(d, k) -> str | None:
    """Why launch ``k`` cannot run on ``d`` (families.launch), None if it can. The kernel is compiled
    for the vectors per thread of :data:`EPTS` only (:func:`kernel`), and the model knows their
    registers only: ept 3 from a user's heuristic ended an evaluation in a KeyError."""
    if k["ept"] not in EPTS:
        return f"ept {k['ept']} is not compiled; the kernel takes {', '.join(map(str, EPTS))} vectors per thread"
    return vector_problem(d, k["vec"]) or block_problem(k["block"], "block")


@dataclasses.dataclass(frozen=True)
class PointwiseDescriptor(FamilyDescriptor):
    """``memory_bound`` stays True: every op here does at most 6 flops per element, bandwidth
    bound on any GPU."""

    KIND = KIND
    op: str
    n: int
    dtype: str = "float32"

    def __post_init__(self):
        self._check_fields({"op": OPS, "dtype": DTYPES}, counts=("n",))

    @property
    def inputs(self) -> int:
        return 2 if self.op in BINARY else 1

    @property
    def bytes_moved(self) -> int:
        return (self.inputs + 1) * self.n * self.itemsize_bytes


descriptor = PointwiseDescriptor.parse


def space(d: PointwiseDescriptor) -> list[Knobs]:
    vecs = [v for v in (1, 2, 4, 8) if v * d.itemsize_bytes <= 16]
    return [Knobs(vec=v, ept=e, block=b, grid=g) for v in vecs for e in EPTS for b in BLOCKS for g in GRIDS]


def launch_shape(d: PointwiseDescriptor, k) -> tuple[int, int]:
    """(blocks, blocks resident per SM) of a launch; the grid is what the kernel is launched with."""
    vec, ept, block = int(k["vec"]), int(k["ept"]), int(k["block"])
    nvec = max(1, math.ceil(d.n / vec))
    need = math.ceil(nvec / (block * ept))
    return need, min(32, 2048 // block)


def grid_blocks(d, k, sms: int) -> int:
    need, _ = launch_shape(d, k)
    return need if k["grid"] == "cover" else max(1, min(need, int(k["grid"]) * sms))


# Facts of the kernel as compiled (no fit), from the CUDA 13.0 ``nvcc -arch=sm_90 -cubin -Xptxas -v`` build of
# SOURCE with every pointwise<T, VEC, EPT> instantiated, and its SASS (nvdisasm):
# - REGISTERS: registers per thread of each kernel. The op is a runtime argument, so every op of a data type
#   runs the same kernel with the same registers; they set the blocks resident per SM (8-register granules).
# - the load rounds (:func:`load_rounds`): in the unary path of the __half kernels with VEC >= 2 and EPT >= 2,
#   each loaded vector is repacked (PRMT) right after its load, and the next load issues only once that
#   repacking has its data: a thread's loads go out in two rounds (EPT 2: one and one, EPT 4: three and one).
#   The binary path, and every float and double kernel, issues all its loads first.
# - the op switch is evaluated per element (the kernel's ``apply``): 7-12 dependent instructions per element,
#   compares, branches and convergence barriers, whatever the op (ELEM_CYCLES below).
REGISTERS = {
    "float16": {(1, 1): 21, (1, 2): 27, (1, 4): 40, (2, 1): 22, (2, 2): 29, (2, 4): 37,
                (4, 1): 26, (4, 2): 31, (4, 4): 56, (8, 1): 32, (8, 2): 42, (8, 4): 64},
    "float32": {(1, 1): 21, (1, 2): 27, (1, 4): 40, (2, 1): 24, (2, 2): 31, (2, 4): 48,
                (4, 1): 31, (4, 2): 40, (4, 4): 64},
    "float64": {(1, 1): 22, (1, 2): 28, (1, 4): 48, (2, 1): 30, (2, 2): 38, (2, 4): 64}}

# Empirical constants, fitted jointly (weighted least squares in log time, the candidates within 10% of each
# problem's best weighing 1 and the rest 0.2) to every candidate's device time in the ten H200 recordings of
# 2026-12-01/02, each replayed with the profile it was measured with (53,800 times, seven problem sets on six
# hosts; RECORDINGS in tests/test_heuristics_pointwise_h200.py): A (host 1, seed 0, ...-seed0), B and C (host 2,
# seeds 0 and 1, ...-after), D and E (host 3, seeds 1 and 2, ...-live3), F and G (host 4, seeds 3 and 2,
# ...-live5), H (host 5, seed 4, ...-live6), I and J (host 6, seeds 6 and 7, 2026-12-02-...-s3c1). Structure and
# constants were judged leaving one problem set (seed) out at a time, fitted on the other six: each held-out
# recording's choices stay at 0.988-0.993 of the exhaustive best, worst 0.907-0.941, with the margins below
# (README). Each constant,
# with what it stands for and where it sits (2184754's values, from A-E, in brackets where the rest moved them):
# - FLOOR: the launch floor as a share of the DRAM read line's intercept (``memory.dram.fixed_cost_us``, 4.24-4.51
#   us on the six hosts), 0.70: 3.0-3.2 us, below the 3.2-3.5 us the smallest problems took;
# - DISPATCH_US, THREAD_US: the block scheduler's pace per SM, the slower of a block's dispatch and its
#   threads' start (0.083 us per block, 0.46 ns per thread: 128-thread blocks are dispatch-bound, 256- and
#   512-thread ones start-bound). Every grid's last block starts after its SM's share of the grid is
#   dispatched and then does all its work, a cover grid's one pass or a persistent block's every iteration
#   (the busiest block's ceil(need / grid) of them);
# - ELEM_CYCLES, DEP_CYCLES: a thread works its elements one after another, each walking the op switch
#   (134 dependent cycles per element, 11-19 per instruction of that chain) plus 3.15 cycles per issue slot
#   of the op itself (SLOTS): what makes many elements per thread slow on small tensors;
# - LAT_SHARE: the memory latency a thread's iteration waits, as a share of Little's law over
#   ``memory.bytes_in_flight_per_sm`` at the level's bandwidth (0.64 [0.54]: 0.36 us at DRAM, 0.17 us at L2);
# - SERIAL_LATENCIES: an iteration whose loads go out in two rounds (load_rounds) waits 2.7 [3.2] latencies, not
#   one (fp16 relu, exp and sigmoid at 2 or 4 vectors per thread ran 1.25-1.6x slower than at one on DRAM-sized
#   tensors; fp16 add and mul, whose loads go out at once, 1.01-1.10x);
# - SMOOTH: bandwidth and Little's law over the rounds combine as a p-norm of 2.2 (a soft knee);
# - TAIL_STRIDE: the share of a grid-stride loop's last partial iteration that costs a whole one (0.24 [0.52]:
#   with the busiest SM's issue slots counted per iteration in compute_us, less of that tail is left to it);
# - L2_WIDTH_EXP: narrow accesses lose more at L2 than at DRAM: L2 bandwidth times
#   (DRAM(width) / DRAM(16 B)) ** 2.2;
# - COVER_L2, STRIDE_L2: where, in multiples of the L2 scale (:func:`calib.heuristics.predictor.l2_scale_bytes`:
#   0.70 of the hardware L2, 44.0 MB on the H200), a working set streamed once per call (inputs and the written
#   output) stops being served by L2, linearly between the two. A cover grid sweeps the tensor in strict order,
#   LRU's worst case, and loses L2 from 0.57 [0.75] of the scale (DRAM from 1.18); a grid-stride loop's
#   persistent blocks drift apart and keep all hits to 0.84 of it, none past 1.19 [1.38]. They were fitted in
#   multiples of each recording's measured ``memory.l2.capacity_bytes`` (43.4-47.1 MB on A-J); keyed on it,
#   a profile that measured 36.9 MB (session 4's full runs, 2026-12-02) put N's 43.9 MB fp64 mul past
#   STRIDE_L2 and chose a cover grid at 0.745 of the best (predictor.L2_SHARE says more);
# - OCCUPANCY_THREADS: the resident threads per SM that hide the ALU latency of exp and sigmoid (580 [740]);
# - INDEX_SLOTS: issue slots per vector access for its address, bounds and loop (8.0 [14.6]), and SWITCH_SLOTS:
#   issue slots per element of the op switch (2.8): its compares and branches take issue slots as well as
#   latency. Narrow accesses of the compute-heavy ops ran slower than wide ones at equal bytes;
# - HALF_UNROLL_SLOTS: issue slots per element per doubling of ept in the __half kernels' unrolled conversion
#   code (5.3).
FLOOR = 0.70
DISPATCH_US, THREAD_US = 0.083, 0.00046
ELEM_CYCLES, DEP_CYCLES = 134.0, 3.15
LAT_SHARE = 0.64
SERIAL_LATENCIES = 2.7
SMOOTH = 2.2
TAIL_STRIDE = 0.24
L2_WIDTH_EXP = 2.2
COVER_L2, STRIDE_L2 = (0.57, 1.18), (0.84, 1.19)
OCCUPANCY_THREADS = 580.0
INDEX_SLOTS = 8.0
SWITCH_SLOTS = 2.8
HALF_UNROLL_SLOTS = 5.3
# Why the choice needs a margin, from the recordings A-J: under 2184754's model 13 problems ran below 0.92 of the
# best, and 12 of them chose ept 2 or 4 where ept 1 was faster (the 13th, E's fp64 add of 44 MB, a 256-thread
# persistent grid where 512 threads won):
# - on L2-resident fp32 and fp64 tensors (0.1-0.9 of the L2), ept 2 at the widest vector, 256 threads and a
#   cover grid ran a median 1.055x (0.95-1.21x, 136 problems) the time of ept 1, where that model said 1.003x;
#   add, mul and maximum 1.06-1.09x, relu 1.03x, exp 1.05x and sigmoid 1.08x. The loss is not the SFU: relu
#   uses none and loses too (I, relu n=1713280: 1.106x); and if expf is one MUFU.EX2 per element (its range
#   reduction FMA work), the SFU's 16 results per clock per SM (the CUDA C++ Programming Guide's arithmetic
#   throughput table, compute capability 9.0) take a quarter of the time the FP32 issue slots of the element do;
# - the largest losses are the last wave of compute-heavy ops: J, exp n=1753424 at vec 4 ept 2 runs 856 blocks
#   of 256 on 132 SMs x 6 resident, 1.08 waves: 64 blocks then run alone, one per SM at 256 threads, below the
#   occupancy that hides the exp chain, for one thread's whole life (8 elements). compute_us models that (the
#   model's ept2/ept1 there 0.946x -> 1.077x; measured 1.214x; I, exp n=3463864 at 2.14 waves: 1.017x ->
#   1.061x, measured 1.149x), and a persistent grid's busiest block doing ceil(iterations) of them (J, exp: vec 4
#   ept 1 with 4 blocks of 512 per SM, 1.62 iterations, 6.14 us against 5.47 for the cover grid);
# - the rest of the ept-2 loss (binary ops and relu: the model's median ratio is still 0.97-1.01x) it does not
#   explain, so the choice carries it: EPT_MARGIN[level] is the 90th percentile, over the recorded problems of
#   that level, of the model's error on the log gap between its best-ranked ept>1 candidate and its best-ranked
#   ept-1 cover candidate (:func:`demonstrated_margins`, 1000 problems: 0.049 below 0.1 of the L2 scale, 0.143
#   from there to 0.9, 0.077 beyond; 0.135 and 0.075 when the levels were in multiples of each recording's
#   measured capacity). Leaving each problem set out of both the fit and the margins, the held-out
#   worst case is 0.904-0.941 (0.824-0.937 before), geomean 0.988-0.992 (0.984-0.990).
EPT_MARGIN = {"launch": 0.049, "l2": 0.143, "dram": 0.077}
# The same measure for a persistent grid against a cover one (both one vector per thread): on L2-resident
# tensors the model's error on that gap has a 90th percentile of 0.106 (0.093 with the levels in multiples of the
# measured capacity; 192 problems then, up to 0.178: fp64 relu of
# 1052230 and 1531768 elements on 4 blocks of 512 per SM ran 6.25 and 7.25 us where it said 5.03 and 5.94), and
# the grid keeps nothing of L2 that a cover grid loses there. Past 0.9 of the L2 it carries none: there the L2 a
# grid-stride loop keeps (COVER_L2, STRIDE_L2) is a real gain of up to 1.22x (20 problems above 1.02x) that the
# same percentile (0.105) would give away (with a margin at every level, leaving each seed out: worst 0.818);
# below 0.1 its error is
# under 0.01. With the L2 margin, leaving each seed out: geomean 0.988-0.993, worst 0.907-0.941 (0.904 without).
STRIDE_MARGIN = {"l2": 0.106}
LEVELS = (0.1, 0.9)  # working set / L2 scale: launch-bound, L2-resident, past L2 (the margins' levels)
# fp32 issue slots per element (the FMA pipe's rate, ``compute.fp32.fma_tflops`` / 2): the cheap ops
# are a conversion and an op; expf (range reduction, ex2, scaling) and sigmoid (expf and an IEEE
# divide) from the compute-bound H200 rows of 2026-12-01 (fp16 sigmoid of 71M and 196M elements at
# 0.75 G elements/s; fp16 exp of 37M elements within 5% of the copy bandwidth); float64 in fp32 slots
# (the FP64 pipe at half the rate, exp and divide as polynomial and Newton code: fp64 sigmoid and exp
# of ~1-2M L2-resident elements ran at 0.28 and 0.36 G elements/s).
SLOTS = {"float16": {"add": 2, "mul": 2, "maximum": 2, "relu": 2, "exp": 24, "sigmoid": 43},
         "float32": {"add": 2, "mul": 2, "maximum": 2, "relu": 2, "exp": 24, "sigmoid": 43},
         "float64": {"add": 2, "mul": 2, "maximum": 2, "relu": 2, "exp": 93, "sigmoid": 119}}


def load_rounds(d: PointwiseDescriptor, vec: int, ept: int) -> int:
    """Rounds in which a thread's loads go out (1: all at once); see the kernel facts above."""
    return 2 if d.itemsize_bytes == 2 and d.inputs == 1 and vec >= 2 and ept >= 2 else 1


def _ramp(x: float, lo_hi: tuple[float, float]) -> float:
    lo, hi = lo_hi
    return 1.0 if x <= lo else 0.0 if x >= hi else (hi - x) / (hi - lo)


def model_us(d: PointwiseDescriptor, k, q, hidden: bool = False) -> float:
    """The launch floor, then the slowest of: the bytes at the bandwidth of the level the working set
    sits in (L2 or DRAM) at the access width, combined with Little's law over the thread slots
    (rounds of resident blocks, or loop iterations, each the memory latency, once per load round, plus
    its thread's elements one after another); the block scheduler's pace, after which the last block
    still does its work; and the busiest SM's issue slots, wave by wave (:func:`compute_us`)."""
    e, nin = d.itemsize_bytes, d.inputs
    vec, ept, block = int(k["vec"]), int(k["ept"]), int(k["block"])
    sms = P.sm_count(q)
    width = vec * e
    slots = SLOTS[d.dtype][d.op]
    if d.dtype == "float16" and not hidden:  # the __half unrolled code (the simulated device has none)
        slots += HALF_UNROLL_SLOTS * math.log2(ept)
    need, resident = launch_shape(d, k)
    nvec = max(1, math.ceil(d.n / vec))
    if hidden:  # the simulated compiler's registers: 16 + the loaded vectors
        regs = 16 + math.ceil(nin * ept * width / 4)
    else:
        regs = REGISTERS[d.dtype][(vec, ept)]
    regs = 8 * math.ceil(regs / 8)
    resident = max(1, min(resident, 65536 // int(regs * block)))
    g = grid_blocks(d, k, sms)
    cover = g >= need  # a persistent grid no smaller than the data is the same launch as a cover grid
    per_sm = g / sms
    iterations = need / g
    if cover:  # waves of resident blocks
        rounds = max(1.0, per_sm / resident)
    else:  # loop iterations, times the waves of persistent blocks: those that do not fit wait for a whole one
        rounds = iterations * math.ceil(per_sm / resident - 1e-9)
    ept_eff = min(ept, math.ceil(nvec / block))  # vectors the first block's threads really load
    nbytes = d.bytes_moved
    cap = P.l2_scale_bytes(q)
    f = _ramp(nbytes / cap, COVER_L2 if cover else STRIDE_L2)
    dram16 = P.dram_gbps(q, "copy", 16)
    dram = P.dram_gbps(q, "copy", width)
    l2_16 = q("memory.l2.read_bandwidth_gbps", P.DEFAULTS["memory.l2.read_bandwidth_gbps"])
    l2 = l2_16 * (dram / dram16) ** L2_WIDTH_EXP
    t_bw = nbytes * (f / (l2 * 1e3) + (1 - f) / (dram * 1e3))
    # the latency Little's law gives: the bytes in flight per SM that reach the bandwidth, over it
    inflight = q("memory.bytes_in_flight_per_sm", P.DEFAULTS["memory.bytes_in_flight_per_sm"])
    lat = LAT_SHARE * sms * inflight * (f / (l2_16 * 1e3) + (1 - f) / (dram16 * 1e3))
    if load_rounds(d, vec, ept) > 1:
        lat *= SERIAL_LATENCIES
    tflops = q("compute.fp32.fma_tflops", P.DEFAULTS["compute.fp32.fma_tflops"])
    clock_ghz = tflops * 1e3 / (sms * 256)  # 128 FP32 lanes per SM, 2 flops per FMA
    per_element = (ELEM_CYCLES + DEP_CYCLES * slots) / (clock_ghz * 1e3)
    life = lat + per_element * vec * ept_eff
    t_mem = (t_bw**SMOOTH + (rounds * life) ** SMOOTH) ** (1 / SMOOTH)
    if not cover:
        t_mem *= 1 + TAIL_STRIDE * (math.ceil(rounds - 1e-9) / rounds - 1)
    pace = per_sm * max(DISPATCH_US, block * THREAD_US)
    # the busiest persistent block does every one of its iterations: ceil(need / g) of them
    t_mem = max(t_mem, pace + life * (1.0 if cover else math.ceil(iterations - 1e-9)))
    t_cmp = compute_us(d, vec, block, ept_eff, slots, life, per_sm, resident, iterations, cover, q)
    t = FLOOR * P.fixed_us(q) + max(t_mem, t_cmp)
    if hidden:
        t += 0.004 * g / sms + 0.01 * math.ceil(need / g)
    return t


def compute_us(d, vec, block, ept_eff, slots, life, per_sm, resident, iterations, cover, q) -> float:
    """The issue time of the busiest SM (the FP32 pipe's slots per element: the op, its switch, the
    index arithmetic per vector), wave by wave: a cover grid's whole waves of resident blocks, then its
    last partial wave, whose blocks run at their own (lower) occupancy; a persistent grid's loop
    iterations, TAIL_STRIDE of the last partial one's idle share counted as work (the busiest block's
    ceil(iterations) is in :func:`model_us`'s memory time). No wave is shorter than one thread's
    life (its loads' latency and its elements one after another)."""
    sms = P.sm_count(q)
    tflops = q("compute.fp32.fma_tflops", P.DEFAULTS["compute.fp32.fma_tflops"])
    per_element = slots + SWITCH_SLOTS + INDEX_SLOTS * (d.inputs + 1) / vec
    rate = tflops * 0.5e6 / sms  # issue slots per us per SM
    work = block * vec * ept_eff * per_element / rate  # one block's slots, in us of the whole SM

    def wave(blocks: float) -> float:
        occupancy = min(1.0, blocks * block / OCCUPANCY_THREADS)
        return max(blocks * work / occupancy, life)

    waves = per_sm / resident
    if not cover:
        its = math.ceil(iterations - 1e-9)
        stride = iterations * (1 + TAIL_STRIDE * (its / iterations - 1))
        return stride * math.ceil(waves - 1e-9) * wave(min(resident, math.ceil(per_sm - 1e-9)))
    if waves <= 1 + 1e-9:  # one wave: the busiest SM holds ceil(per_sm) blocks
        return wave(math.ceil(per_sm - 1e-9))
    whole = math.floor(waves + 1e-9)
    last = math.ceil(per_sm - whole * resident - 1e-9)  # the last wave's blocks on a busy SM
    return whole * wave(resident) + (wave(last) if last > 0 else 0.0)


def risk_margin(d: PointwiseDescriptor, k, q) -> float:
    """The log-time margin a candidate must beat the fastest-ranked one-vector cover candidate by:
    EPT_MARGIN for more than one vector per thread, STRIDE_MARGIN for a persistent grid smaller than
    the data, by the working set's level; 0 for the one-vector cover launches themselves."""
    cap = P.l2_scale_bytes(q)
    where = level(d.bytes_moved / cap)
    if int(k["ept"]) > 1:
        return EPT_MARGIN[where]
    return STRIDE_MARGIN.get(where, 0.0) if _persistent(d, k, q) else 0.0


def _persistent(d: PointwiseDescriptor, k, q) -> bool:
    """A grid-stride launch with fewer blocks than the data needs (else it is a cover launch)."""
    return grid_blocks(d, k, P.sm_count(q)) < launch_shape(d, k)[0]


def demonstrated_margins(recordings, quantile: float = 0.9) -> dict:
    """The margins from recorded evaluations, ``{"ept": {level: m}, "stride": {level: m}}``:
    ``recordings`` is ``[(rows, q), ...]``, each row a recorded problem (``descriptor``,
    ``times_us``). Per problem, ``ref`` is the one-vector cover launch the model ranks fastest, and
    ``c`` the fastest-ranked candidate of the kind (ept > 1; one vector on a persistent grid); the
    model's error on that gap is log(t_c / t_ref) - log(model_c / model_ref) (positive: it flattered
    ``c``), and a level's margin is its ``quantile`` over the level's problems."""
    errors: dict = {}
    for rows, q in recordings:
        cap = P.l2_scale_bytes(q)
        for row in rows:
            d = descriptor(row["descriptor"])
            scored = [(model_us(d, k, q), row["times_us"][k.autotune_name], k) for k in space(d)
                      if k.autotune_name in row["times_us"]]
            kinds = {"ref": [], "ept": [], "stride": []}
            for s in scored:
                kinds["ept" if s[2]["ept"] > 1 else "stride" if _persistent(d, s[2], q) else "ref"].append(s)
            ref = min(kinds["ref"], key=lambda s: s[0])
            for kind in ("ept", "stride"):
                if kinds[kind]:
                    c = min(kinds[kind], key=lambda s: s[0])
                    err = math.log(c[1] / ref[1]) - math.log(c[0] / ref[0])
                    errors.setdefault(kind, {}).setdefault(level(d.bytes_moved / cap), []).append(err)
    return {kind: {lv: float(np.quantile(e, quantile)) for lv, e in by.items()} for kind, by in errors.items()}


def level(share_of_l2: float) -> str:
    """Where a working set of ``share_of_l2`` x the L2 scale (predictor.l2_scale_bytes) sits, for the margins."""
    return "launch" if share_of_l2 < LEVELS[0] else "l2" if share_of_l2 < LEVELS[1] else "dram"


def heuristic(d, profile) -> Knobs:
    """The candidate the predictor ranks fastest on this profile once each candidate carries the
    model's demonstrated error for its kind of choice (:func:`risk_margin`)."""
    d = descriptor(d)
    q = P.q_of(profile)
    scored = [(math.log(model_us(d, k, q)) + risk_margin(d, k, q), i, k) for i, k in enumerate(space(d))]
    return min(scored, key=lambda s: (s[0], s[1]))[2]


def library_knobs(d) -> Knobs:
    """The launch CuPy's elementwise kernels use: one element per thread, 128 threads, a covering grid."""
    return Knobs(vec=1, ept=1, block=128, grid="cover")


def sim_library_us(d, q) -> float:
    """CuPy's elementwise op on the simulated device: its launch shape, plus its 64-bit indexer."""
    return 1.05 * model_us(d, library_knobs(d), q, hidden=True)


def generate(count: int, seed: int = 0, *, max_bytes: float = 3 * 2**30) -> list[PointwiseDescriptor]:
    """``count`` problems: op and dtype uniform, ``n`` log-uniform from 1e3 elements up to what
    keeps the inputs and output within ``max_bytes`` (odd sizes included, for the remainders)."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(count):
        op, dtype = rng.choice(OPS), rng.choice(DTYPES)
        d0 = PointwiseDescriptor(op, 1, dtype)
        hi = max(1.0, max_bytes / ((d0.inputs + 1) * d0.itemsize_bytes))
        n = int(math.exp(rng.uniform(math.log(min(1e3, hi)), math.log(hi))))  # a bound below 1e3: within it
        if rng.random() < 0.7:
            n -= n % 8  # most real sizes are multiples of 8; the rest exercise the remainder code
        out.append(PointwiseDescriptor(op, max(n, 1), dtype))
    return out


# ----------------------------------------------------------------------------------------------
# CuPy

SOURCE = r"""
#include <cuda_fp16.h>
template <typename T, int V> struct alignas(sizeof(T) * V) VecT { T v[V]; };
template <typename T> struct Acc { typedef float type; };
template <> struct Acc<double> { typedef double type; };
__device__ __forceinline__ float to_acc(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_acc(float x) { return x; }
__device__ __forceinline__ double to_acc(double x) { return x; }
__device__ __forceinline__ void from_acc(float x, __half &y) { y = __float2half_rn(x); }
__device__ __forceinline__ void from_acc(float x, float &y) { y = x; }
__device__ __forceinline__ void from_acc(double x, double &y) { y = x; }

template <typename A> __device__ __forceinline__ A apply(int op, A a, A b) {
  switch (op) {
    case 0: return a + b;
    case 1: return a * b;
    case 2: return a > b ? a : b;
    case 3: return a > A(0) ? a : A(0);
    case 4: return exp(a);
    default: return A(1) / (A(1) + exp(-a));
  }
}

template <typename T, int V, int E>
__global__ void pointwise(const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ y, long long n, int op) {
  typedef typename Acc<T>::type A;
  typedef VecT<T, V> W;
  const long long nvec = n / V;
  const long long chunk = (long long)blockDim.x * E;
  const W *va = reinterpret_cast<const W *>(a);
  const W *vb = reinterpret_cast<const W *>(b);
  W *vy = reinterpret_cast<W *>(y);
  for (long long base = (long long)blockIdx.x * chunk; base < nvec; base += (long long)gridDim.x * chunk) {
    W ra[E], rb[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      long long i = base + (long long)e * blockDim.x + threadIdx.x;
      if (i < nvec) {
        ra[e] = va[i];
        if (op < 3) rb[e] = vb[i];
      }
    }
#pragma unroll
    for (int e = 0; e < E; ++e) {
      long long i = base + (long long)e * blockDim.x + threadIdx.x;
      if (i < nvec) {
        W out;
#pragma unroll
        for (int v = 0; v < V; ++v) {
          A x = to_acc(ra[e].v[v]);
          A z = op < 3 ? to_acc(rb[e].v[v]) : A(0);
          from_acc(apply<A>(op, x, z), out.v[v]);
        }
        vy[i] = out;
      }
    }
  }
  long long i = nvec * V + threadIdx.x;  // the n % V remainder, scalar, in block 0
  if (blockIdx.x == 0 && i < n) {
    A x = to_acc(a[i]);
    A z = op < 3 ? to_acc(b[i]) : A(0);
    from_acc(apply<A>(op, x, z), y[i]);
  }
}
"""
CTYPE = {"float16": "__half", "float32": "float", "float64": "double"}
TOLERANCE = {"float16": 2e-3, "float32": 1e-6, "float64": 1e-12}
_modules: dict = {}


def _cp():
    return require_cupy("the pointwise kernel family on a GPU")


def kernel(dtype: str, vec: int, ept: int):
    """The compiled ``pointwise<T, vec, ept>`` (one module per data type, compiled on first use)."""
    cp = _cp()
    mod = _modules.get(dtype)
    if mod is None:
        names = [f"pointwise<{CTYPE[dtype]},{v},{e}>" for v in (1, 2, 4, 8) if v * ITEMSIZE[dtype] <= 16
                 for e in EPTS]
        mod = _modules[dtype] = cp.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=names)
    return mod.get_function(f"pointwise<{CTYPE[dtype]},{vec},{ept}>")


class GpuCase:
    """One problem on the GPU: inputs, the reference, each candidate's run, the library op."""

    def __init__(self, d: PointwiseDescriptor, sm_count: int, seed: int = 0):
        cp = _cp()
        self.d, self.sm_count = d, sm_count
        rs = cp.random.RandomState(seed)
        self.a = (rs.random_sample(d.n, dtype=cp.float32) * 4 - 2).astype(d.dtype)
        self.b = (rs.random_sample(d.n, dtype=cp.float32) * 4 - 2).astype(d.dtype) if d.inputs == 2 else self.a
        self.y = cp.empty(d.n, dtype=d.dtype)
        self._ref = None

    def run(self, k):
        cp = _cp()
        fn = kernel(self.d.dtype, int(k["vec"]), int(k["ept"]))
        g = grid_blocks(self.d, k, self.sm_count)
        fn((g,), (int(k["block"]),), (self.a, self.b, self.y, np.int64(self.d.n), np.int32(OP_CODE[self.d.op])))
        return cp

    def reference(self):
        if self._ref is None:
            cp = _cp()
            a = self.a.astype(cp.float64)
            b = self.b.astype(cp.float64)
            op = self.d.op
            self._ref = {"add": lambda: a + b, "mul": lambda: a * b, "maximum": lambda: cp.maximum(a, b),
                         "relu": lambda: cp.maximum(a, 0), "exp": lambda: cp.exp(a),
                         "sigmoid": lambda: 1 / (1 + cp.exp(-a))}[op]()
        return self._ref

    def check(self, k):
        return check_output(self, k, TOLERANCE[self.d.dtype])

    def library(self):
        """The op a CuPy user calls (a ufunc; sigmoid as the ElementwiseKernel one would write)."""
        cp = _cp()
        op = self.d.op
        if op == "sigmoid":
            ker = _sigmoid_kernel()
            return lambda: ker(self.a, self.y)
        fn = {"add": lambda: cp.add(self.a, self.b, out=self.y), "mul": lambda: cp.multiply(self.a, self.b, out=self.y),
              "maximum": lambda: cp.maximum(self.a, self.b, out=self.y),
              "relu": lambda: cp.maximum(self.a, 0, out=self.y), "exp": lambda: cp.exp(self.a, out=self.y)}[op]
        return fn

    def free(self):
        self.a = self.b = self.y = self._ref = None


_sig: dict = {}


def _sigmoid_kernel():
    if "k" not in _sig:
        _sig["k"] = _cp().ElementwiseKernel("T x", "T y", "y = (T)(1.0f / (1.0f + expf(-(float)x)))", "calib_sigmoid")
    return _sig["k"]
