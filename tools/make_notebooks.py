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


NOTEBOOKS = {"memory_bandwidth": MEMORY_BANDWIDTH}


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
