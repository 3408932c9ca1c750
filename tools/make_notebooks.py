"""Write the suite's notebooks from the cell sources below (run after editing them).

The notebooks are committed without outputs; this script keeps their JSON canonical so that a diff
shows only what changed in a cell. Edit interactively in JupyterLab, or here, and re-run.
"""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent.parent / "notebooks"

MEMORY_BANDWIDTH = [
    new_markdown_cell("""# DRAM bandwidth

Sweeps read, write and copy kernels over buffer sizes well beyond the L2 cache, at access widths of
1, 2, 4, 8 and 16 bytes per thread, and fits `t = fixed_cost + bytes / bandwidth` to each
(kind, width). Writes `memory.dram.{read,write,copy}_bandwidth_gbps` (16-byte accesses), their
`.alignN` variants and `memory.dram.fixed_cost_us`, each with a 95% confidence interval from the fit.

Run headless with `calib run`, or here: change the parameters cell and run all."""),
    new_code_cell("""backend = "auto"        # "auto": the GPU where there is one, else the simulated device
wait_for_workers = False # leave the measuring to `calib worker` processes (a fleet's shared database)
device = 0               # CUDA device index
sim_spec = None          # JSON spec of the simulated device (None: H200-like defaults)
suite = "quick"          # "quick" or "full" size grid
sizes_mib = None         # explicit buffer sizes in MiB, overriding the suite's grid
kinds = ["read", "write", "copy"]
widths = [1, 2, 4, 8, 16]
rel_precision = 0.005    # stop repeating a point when its median is known to ±0.5% ...
budget_s = 0.5           # ... or after this much kernel time
max_samples = 400
robust = False           # Huber M-estimate instead of weighted least squares
output_dir = "."
db = None                # results database URL (None: results.sqlite in output_dir)
label = None             # session label; the same label resumes a killed sweep
seed = None              # noise seed of the simulated device""", metadata={"tags": ["parameters"]}),
    new_code_cell("""from calib.calibration import Calibration
from calib.experiments import dram
from calib.report import parameter_frame
from calib.timing import StoppingRule

cal = Calibration(backend=backend, sim_spec=sim_spec, device=device, db=db, output_dir=output_dir, label=label,
                  rule=StoppingRule(rel_precision=rel_precision, budget_s=budget_s, max_samples=max_samples),
                  seed=seed)
print(cal.banner())"""),
    new_markdown_cell("## Sweep\nEvery point is a job in the results store; a re-run with the same `label` measures only what is missing."),
    new_code_cell("""configs = dram.plan(suite, l2_bytes=cal.backend.l2_bytes, memory_bytes=cal.backend.memory_bytes,
                   size_list=None if sizes_mib is None else [int(s * 2**20) for s in sizes_mib],
                   kinds=kinds, widths=widths)
frame, report = cal.sweep(configs, desc="DRAM sweep", wait_for_workers=wait_for_workers)
cal.release_gpu()  # measuring is done: the next notebook of a run may use the GPU while this one fits
print(report)
frame.to_parquet(cal.output_dir / "memory_bandwidth.parquet")
frame.head()"""),
    new_markdown_cell("## Fit\nOne weighted least-squares line per (kind, width); the bandwidth interval is the slope's interval inverted."),
    new_code_cell("""records, fits = dram.fit(frame, robust=robust, source="notebooks/memory_bandwidth.ipynb")
parameter_frame(records)"""),
    new_code_cell("""fig = dram.plot_bandwidth(frame, records, simulated=cal.simulated)
cal.save_figure(fig, "memory_bandwidth")"""),
    new_markdown_cell("""## Residuals

A good fit leaves residuals without a pattern against fitted time or size and close to the line in
the Q-Q plot. Curvature means the linear model misses something (cache effects at the small end,
throttling at the large end); a poor fit is flagged in the parameter's record, not hidden."""),
    new_code_cell("""for kind in kinds:
    name = dram.param_name(kind)
    if name in fits:
        fig = fits[name].plot_residuals(title=cal.title(name), x_label="bytes moved (MiB)", x_scale=2**20)
        cal.save_figure(fig, "residuals-" + name.replace(".", "_"))
fig = dram.plot_width_residuals(fits, simulated=cal.simulated)
cal.save_figure(fig, "residuals-by-width")"""),
    new_markdown_cell("## Reading"),
    new_code_cell("""read = records.get("memory.dram.read_bandwidth_gbps")
if read:
    lo, hi = read["ci95"]
    print(f"DRAM read with 16-byte accesses: {read['value']:.0f} GB/s (95% CI {lo:.0f} to {hi:.0f}).")
    for w in sorted(set(widths) - {16}):
        r = records.get(f"memory.dram.read_bandwidth_gbps.align{w}")
        if r:
            print(f"  {w}-byte accesses reach {r['value'] / read['value']:.0%} of that.")
flagged = {n: r["flags"] for n, r in records.items() if r.get("flags")}
print("fits flagged:" if flagged else "no fit flagged.")
for n, fl in flagged.items():
    print(f"  {n}: {'; '.join(fl)}")
if cal.simulated:
    print("(SIMULATED DEVICE: these values are the spec's planted truth plus noise.)")"""),
    new_code_cell("""fragment = cal.write_fragment(records, source="notebooks/memory_bandwidth.ipynb")
print("wrote", fragment)"""),
]


COMMON_PARAMETERS = '''backend = "auto"        # "auto": the GPU where there is one, else the simulated device
wait_for_workers = False # leave the measuring to `calib worker` processes (a fleet's shared database)
device = 0               # CUDA device index
sim_spec = None          # JSON spec of the simulated device (None: H200-like defaults)
suite = "quick"          # "quick" or "full" grid
rel_precision = 0.005    # stop repeating a point when its median is known to ±0.5% ...
budget_s = 0.5           # ... or after this much kernel time
max_samples = 400
robust = False           # Huber M-estimate instead of weighted least squares
output_dir = "."
db = None                # results database URL (None: $CALIB_DB_URL, else results.sqlite in output_dir)
label = None             # session label; the same label resumes a killed sweep
seed = None              # noise seed of the simulated device'''

SETUP = '''from calib.calibration import Calibration
from calib.experiments import {module}
from calib.report import parameter_frame
from calib.timing import StoppingRule

cal = Calibration(backend=backend, sim_spec=sim_spec, device=device, db=db, output_dir=output_dir, label=label,
                  rule=StoppingRule(rel_precision=rel_precision, budget_s=budget_s, max_samples=max_samples),
                  seed=seed)
print(cal.banner())'''

SWEEP = '''device_fp, _ = cal.backend.fingerprint()
configs = {module}.plan(suite, l2_bytes=cal.backend.l2_bytes, memory_bytes=cal.backend.memory_bytes,
                        sm_count=device_fp.get("sm_count", 132))
frame, report = cal.sweep(configs, desc="{name}", wait_for_workers=wait_for_workers)
cal.release_gpu()  # measuring is done: the next notebook of a run may use the GPU while this one fits
print(report)
frame.to_parquet(cal.output_dir / "{name}.parquet")
frame.head()'''

FIT = '''records, fits = {module}.fit(frame, robust=robust, source="notebooks/{name}.ipynb")
parameter_frame(records)'''

PLOT = '''f = fits.get("{param}")
if f is not None:
    cal.save_figure(f.plot_line(title=cal.title("{param}"), x_label="{x_label}", x_scale={x_scale}), "line-{slug}")
    cal.save_figure(f.plot_residuals(title=cal.title("{param}"), x_label="{x_label}", x_scale={x_scale}),
                    "residuals-{slug}")'''

FINISH = '''flagged = {{n: r["flags"] for n, r in records.items() if r.get("flags")}}
print("fits flagged:" if flagged else "no fit flagged.")
for n, fl in flagged.items():
    print(f"  {{n}}: {{'; '.join(fl)}}")
if cal.simulated:
    print("(SIMULATED DEVICE: these values are the spec's planted truth plus noise.)")
fragment = cal.write_fragment(records, source="notebooks/{name}.ipynb")
print("wrote", fragment)'''


def timed_notebook(name, module, title, intro, lines, reading, setup_prefix=""):
    """A timed calibration: sweep, fit, the line and its residuals per parameter, reading, fragment.
    ``lines``: (parameter, x label, x scale) for each fitted parameter."""
    plots = "\n".join(PLOT.format(param=p, x_label=xl, x_scale=xs, slug=p.replace(".", "_")) for p, xl, xs in lines)
    return [
        new_markdown_cell(f"# {title}\n\n{intro}\n\nRun headless with `calib run`, or here: change the parameters "
                          "cell and run all."),
        new_code_cell(COMMON_PARAMETERS, metadata={"tags": ["parameters"]}),
        new_code_cell(setup_prefix + SETUP.format(module=module)),
        new_markdown_cell("## Sweep\nEvery point is a job in the results store; a re-run with the same `label` "
                          "measures only what is missing."),
        new_code_cell(SWEEP.format(module=module, name=name)),
        new_markdown_cell("## Fit"),
        new_code_cell(FIT.format(module=module, name=name)),
        new_markdown_cell("## The model, and its residuals\nA good fit leaves residuals without a pattern; a poor "
                          "one is flagged in the parameter's record, not hidden."),
        new_code_cell(plots),
        new_markdown_cell(f"## Reading\n\n{reading}"),
        new_code_cell(FINISH.format(name=name)),
    ]


LAUNCH_LATENCY = timed_notebook(
    "launch_latency", "launch", "Launch costs",
    "Host cost to submit a kernel (N back-to-back launches from Python through CuPy, host clock), the "
    "round trip of an empty kernel (intercept of launch + synchronize against the kernel's own work), "
    "and the cost of one kernel node in a CUDA-graph replay (event-timed replays of graphs of N nodes).",
    [("launch.overhead_us", "launches", 1), ("launch.latency_us", "spin iterations", 1),
     ("launch.graph_node_us", "graph nodes", 1)],
    "`launch.overhead_us` is what a Python heuristic pays per launch through CuPy; a C++ runtime pays "
    "less. When `launch.graph_node_us` is well under `launch.overhead_us`, many small kernels are worth a graph.")

MATMUL_SPLITK = timed_notebook(
    "matmul_splitk", "splitk", "Split-K reduction rate",
    "Sums S partial M×N fp32 tiles into one, over split factors S at a fixed tile, and fits "
    "`t = t0 + S·M·N / rate`: `matmul.splitk.elements_reduced_per_second`.",
    [("matmul.splitk.elements_reduced_per_second", "elements reduced (millions)", 1e6)],
    "A split-K heuristic weighs the extra reduction, `(S−1)·M·N / rate`, against the parallelism S "
    "buys; the reduction is memory-bound, so the rate is close to DRAM read bandwidth over 4 bytes.")

COMPUTE_THROUGHPUT = timed_notebook(
    "compute_throughput", "compute", "FP32 FMA throughput",
    "Eight independent FMA chains per thread over 2048 threads per SM, over iteration counts; "
    "`t = t0 + flops / rate` gives `compute.fp32.fma_tflops` (an FMA counts two flops).",
    [("compute.fp32.fma_tflops", "GFLOP", 1e9)],
    "Compare with the peak from the SM count and the SM clock (`bench/`): a kernel whose arithmetic "
    "intensity puts it above DRAM bandwidth over this rate is compute-bound.")

SHARED_MEMORY = timed_notebook(
    "shared_memory", "shared", "Shared-memory bandwidth",
    "Every thread of 2048 per SM reads 16-byte words from its block's shared memory, conflict-free, "
    "over iteration counts; `t = t0 + bytes / bandwidth` gives `memory.shared.bandwidth_gbps` for the "
    "whole device.",
    [("memory.shared.bandwidth_gbps", "GB read", 1e9)],
    "Divide by the SM count and the SM clock for bytes per clock per SM (128 on Hopper by the "
    "datasheet): a staging scheme that reads shared memory more than this allows is bound by it.")

MATMUL_THROUGHPUT = timed_notebook(
    "matmul_throughput", "matmul", "Dense matmul throughput (cuBLAS)",
    "Products through `cupy.matmul` (cuBLAS) on random inputs, for fp16, bf16 (where CuPy holds "
    "bfloat16 arrays) and tf32 (float32 with CuPy's TF32 mode): an 8192 × 8192 output with the reduction "
    "depth K from 1024 to 8192, so that cuBLAS's grid of output tiles is the same at every point; "
    "`t = t0 + 2·M·N·K / rate` gives `compute.<type>.tensor_tflops`. Each point starts after an idle "
    "pause: sustained tensor-core work reaches the power cap. A point whose clock dropped or whose samples "
    "never settled is measured again after a longer pause, up to twice, and the fastest attempt is kept (the "
    "others stay in the results store); points still marked throttled ran capped. If cuBLAS switches kernels "
    "along K, the rate changes there and the fit says so (lack of fit, a wide CI).",
    [("compute.fp16.tensor_tflops", "TFLOP", 1e12), ("compute.bf16.tensor_tflops", "TFLOP", 1e12),
     ("compute.tf32.tensor_tflops", "TFLOP", 1e12)],
    "The rate is cuBLAS's on a large, tile-aligned output before the power cap; a heuristic choosing between a library call "
    "and a fused kernel compares its own achieved rate against this one.",
    setup_prefix="import os\nos.environ.setdefault(\"CUPY_TF32\", \"1\")  # before CuPy is first imported\n")

REDUCTIONS = timed_notebook(
    "reductions", "reduction", "Reductions along the inner and the outer axis",
    "Sums a row-major fp32 matrix of 8192 columns along its rows (inner: contiguous, one block per "
    "row) and along its columns (outer: strided, threads own columns and add slabs atomically), over "
    "row counts far beyond L2; `t = t0 + bytes / bandwidth` gives `reduction.inner.bandwidth_gbps` and "
    "`reduction.outer.bandwidth_gbps`.",
    [("reduction.inner.bandwidth_gbps", "GB read", 1e9), ("reduction.outer.bandwidth_gbps", "GB read", 1e9)],
    "Both are memory-bound; how far each falls below `memory.dram.read_bandwidth_gbps` is what a "
    "reduction scheduler pays for the axis it reduces along.")

NORMALIZATION = timed_notebook(
    "normalization_bandwidth", "normalization", "Normalization load bandwidth by access width",
    "A persistent softmax (rows of 4096 fp32 values held in registers, 16 per thread of a 256-thread "
    "block) over row counts far beyond L2, loading and storing 4, 8 or 16 bytes per access; "
    "`t = t0 + bytes / bandwidth` (bytes read plus written) gives `normalization.load_bandwidth_gbps.alignN`.",
    [("normalization.load_bandwidth_gbps.align4", "GB moved", 1e9),
     ("normalization.load_bandwidth_gbps.align8", "GB moved", 1e9),
     ("normalization.load_bandwidth_gbps.align16", "GB moved", 1e9)],
    "The ratio between the widths is what a normalization heuristic weighs when the row length or "
    "alignment forbids the widest vector loads.")

CACHE_HIERARCHY = [
    new_markdown_cell("""# The L2: capacity and read bandwidth

Reads one working set W over and over through L2 (not L1), for W on a log grid from L2/8 to 4×L2,
dense around the reported size, and fits a hinge to the times: the L2 cost per byte below the
ramp's start, the DRAM cost above its end, linear in log W between: `memory.l2.capacity_bytes`
(where the ramp starts: the largest working set fully served by L2) and
`memory.l2.capacity_bytes.ramp_end`, with Wald CIs from the fit. A second series at one working set
well inside L2 varies the bytes per launch; its line `t = t0 + bytes / bandwidth` gives
`memory.l2.read_bandwidth_gbps`.

Run headless with `calib run`, or here: change the parameters cell and run all."""),
    new_code_cell(COMMON_PARAMETERS, metadata={"tags": ["parameters"]}),
    new_code_cell(SETUP.format(module="cache")),
    new_markdown_cell("## Sweep"),
    new_code_cell(SWEEP.format(module="cache", name="cache_hierarchy")),
    new_markdown_cell("## Fit"),
    new_code_cell(FIT.format(module="cache", name="cache_hierarchy")),
    new_code_cell('''fig = cache.plot(frame, fits, title=cal.title("achieved bandwidth against working set"),
                 simulated=cal.simulated)
cal.save_figure(fig, "cache_hierarchy")'''),
    new_code_cell('''line = fits.get("memory.l2.read_bandwidth_gbps")
if line is not None:
    fig = line.plot_residuals(title=cal.title("memory.l2.read_bandwidth_gbps"), x_label="GiB read", x_scale=2**30)
    cal.save_figure(fig, "residuals-memory_l2_read_bandwidth_gbps")'''),
    new_markdown_cell("""## Reading

A heuristic that tiles for L2 keeps its reused working set under `memory.l2.capacity_bytes`, not
under the L2 size the device reports: past the ramp's start some of the data comes from DRAM
again. The DRAM plateau the fit finds is in the diagnostics (`dram_plateau_gbps`), a cross-check
on `memory.dram.read_bandwidth_gbps`."""),
    new_code_cell(FINISH.format(name="cache_hierarchy")),
]

OCCUPANCY = [
    new_markdown_cell("""# Bytes in flight per SM for DRAM bandwidth

Runs the DRAM read kernel at every combination of resident blocks per SM, unroll and access width,
so that each SM keeps from about 1 KiB to 256 KiB in flight, and fits Little's law, achieved
bandwidth = bytes in flight × SMs / latency up to the DRAM ceiling. `memory.bytes_in_flight_per_sm`
is what an SM must keep in flight for 90% of that ceiling.

Run headless with `calib run`, or here: change the parameters cell and run all."""),
    new_code_cell(COMMON_PARAMETERS, metadata={"tags": ["parameters"]}),
    new_code_cell(SETUP.format(module="occupancy")),
    new_markdown_cell("## Sweep"),
    new_code_cell(SWEEP.format(module="occupancy", name="occupancy")),
    new_markdown_cell("## Fit"),
    new_code_cell(FIT.format(module="occupancy", name="occupancy")),
    new_code_cell('''fig = occupancy.plot(fits, title=cal.title("achieved bandwidth against bytes in flight"),
                     simulated=cal.simulated)
cal.save_figure(fig, "occupancy")'''),
    new_markdown_cell("""## Reading

A kernel keeps `resident warps × 32 × bytes per load × independent loads` in flight per SM; below
`memory.bytes_in_flight_per_sm` it cannot reach 90% of DRAM bandwidth however it is scheduled.
The fitted latency (diagnostics) is the loaded DRAM latency that Little's law implies."""),
    new_code_cell(FINISH.format(name="occupancy")),
]

REGISTERS = [
    new_markdown_cell("""# Registers of a persistent normalization kernel

Compiles a persistent softmax that keeps N fp32 elements per thread in registers, for N over a
grid, and reads the compiler's register count and spill bytes from the kernel attributes.
`regs = additional + slope · N` over the unspilled points gives `normalization.additional_registers`
(the constant heuristics hard-code as "register overhead"); the largest N compiled without spills is
`normalization.max_persistent_elements_per_thread`. No timing: the numbers are the compiler's."""),
    new_code_cell('''backend = "auto"
wait_for_workers = False  # accepted for symmetry with the timed notebooks: compiling needs no worker
device = 0
sim_spec = None
suite = "quick"
output_dir = "."
db = None
label = None
seed = None''', metadata={"tags": ["parameters"]}),
    new_code_cell('''import pandas as pd
from calib.calibration import Calibration
from calib.experiments import registers
from calib.report import parameter_frame

cal = Calibration(backend=backend, sim_spec=sim_spec, device=device, db=db, output_dir=output_dir, label=label,
                  seed=seed)
print(cal.banner())
cal.await_turn()  # in calib run, compiling waits while a host-timed notebook measures
reports = cal.backend.compile_report(registers.plan(suite))
table = pd.DataFrame(reports)
table["simulated"] = cal.simulated
table.to_parquet(cal.output_dir / "registers.parquet")
records, line = registers.fit(reports, line_max_n=registers.LINE_MAX_N[suite], source="notebooks/registers.ipynb")
parameter_frame(records)'''),
    new_code_cell('''fig = registers.plot(table, records, title=cal.title("registers against buffered elements"), line=line)
cal.save_figure(fig, "registers")'''),
    new_markdown_cell("""## Reading

A heuristic that sizes a persistent buffer checks `additional + N ≤ register budget per thread`
(65536 / threads per block, at most 255); past `max_persistent_elements_per_thread` the compiler
spills to local memory and the persistent schedule loses its point."""),
    new_code_cell(FINISH.format(name="registers")),
]

NOTEBOOKS = {"memory_bandwidth": MEMORY_BANDWIDTH, "cache_hierarchy": CACHE_HIERARCHY, "shared_memory": SHARED_MEMORY,
             "occupancy": OCCUPANCY, "matmul_throughput": MATMUL_THROUGHPUT, "reductions": REDUCTIONS,
             "normalization_bandwidth": NORMALIZATION,
             "launch_latency": LAUNCH_LATENCY,
             "matmul_splitk": MATMUL_SPLITK, "compute_throughput": COMPUTE_THROUGHPUT, "registers": REGISTERS}


def write(name: str, cells):
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"{name.replace('_', '-')}-{i}"
    nbformat.validate(nb)
    (HERE / f"{name}.ipynb").write_text(nbformat.writes(nb) + "\n")


def main():
    for name, cells in NOTEBOOKS.items():
        write(name, cells)


if __name__ == "__main__":
    main()
