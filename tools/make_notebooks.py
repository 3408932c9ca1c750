"""Write the suite's notebooks, one per calibration of the registry (run after changing one).

Every notebook has the same shape; what differs comes from its calibration module
(``calib/calibrations/<id>.py``): the title, the introduction, the extra parameters its plan takes,
the environment it needs before CuPy is imported, and the reading. The notebooks are committed
without outputs; this script keeps their JSON canonical so that a diff shows only what changed.
"""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from calib import calibrations

HERE = Path(__file__).resolve().parent.parent / "notebooks"

COMMON_PARAMETERS = '''backend = "auto"         # "auto": the GPU where there is one, else the simulated device
wait_for_workers = False # leave the measuring to `calib worker` processes (a fleet's shared database)
device = 0               # CUDA device index
sim_spec = None          # JSON spec of the simulated device (None: H200-like defaults)
suite = "quick"          # "quick" or "full" grid
rel_precision = 0.005    # stop repeating a point when its median is known to ±0.5% ...
budget_s = 0.5           # ... or after this much kernel time
max_samples = 400
robust = False           # Huber M-estimate instead of weighted least squares
output_dir = None        # None: a folder for this calibration in your user data directory (never here)
db = None                # results database URL (None: $CALIB_DB_URL, else results.sqlite in output_dir)
label = None             # session label; the same label resumes a killed sweep
seed = None              # noise seed of the simulated device
progress = True          # progress bars (calib run turns them off)'''

SETUP = '''{environment}from calib.calibration import Calibration
from calib.timing import StoppingRule

cal = Calibration("{id}", backend=backend, sim_spec=sim_spec, device=device, db=db,
                  output_dir=output_dir, label=label, seed=seed, progress=progress,
                  rule=StoppingRule(rel_precision=rel_precision, budget_s=budget_s, max_samples=max_samples))
print(cal.banner())'''

MEASURE_NOTE = {
    "timed": "Every point is a job in the results store; a re-run with the same `label` measures only what is "
             "missing.",
    "compiled": "The compiler's own report: nothing is timed, and the GPU is not needed beyond compiling.",
}


def parameters_cell(module) -> str:
    lines = [COMMON_PARAMETERS]
    for name, (default, comment) in module.OPTIONS.items():
        lines.append(f"{name} = {default!r}".ljust(24) + f" # {comment}")
    return "\n".join(lines)


def cells(module) -> list:
    environment = "".join(f'import os\nos.environ.setdefault("{k}", "{v}")  # before CuPy is first imported\n'
                          for k, v in module.ENVIRONMENT.items())
    options = "".join(f", {name}={name}" for name in module.OPTIONS)
    return [
        new_markdown_cell(f"# {module.TITLE}\n\n{module.INTRO}\n\nRun headless with `calib run`, or here: change "
                          "the parameters cell and run all."),
        new_code_cell(parameters_cell(module), metadata={"tags": ["parameters"]}),
        new_code_cell(SETUP.format(environment=environment, id=module.ID)),
        new_markdown_cell(f"## Measure\n{MEASURE_NOTE[module.KIND]}"),
        new_code_cell(f"data = cal.measure(suite, wait_for_workers=wait_for_workers{options})\ndata.head()"),
        new_markdown_cell("## Fit\nEvery parameter with its 95% confidence interval from the fit; a parameter "
                          "that could not be fitted says why."),
        new_code_cell("result = cal.fit(data, robust=robust)\nresult.table()"),
        new_markdown_cell("## The model, and its residuals\nA good fit leaves residuals without a pattern; a poor "
                          "one is flagged in the parameter's record, not hidden."),
        new_code_cell("cal.show_figures(data, result)"),
        new_markdown_cell(f"## Reading\n\n{module.READING}"),
        new_code_cell("print(cal.reading(result))\ncal.write_fragment(result);"),
    ]


def notebooks() -> dict:
    return {module.ID: cells(module) for module in calibrations.all_calibrations()}


def write(name: str, nb_cells):
    nb = new_notebook(cells=nb_cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"{name.replace('_', '-')}-{i}"
    nbformat.validate(nb)
    (HERE / f"{name}.ipynb").write_text(nbformat.writes(nb) + "\n")


def main():
    for name, nb_cells in notebooks().items():
        write(name, nb_cells)


if __name__ == "__main__":
    main()
