"""Running a notebook interactively, as JupyterLab does (a kernel whose working folder is notebooks/,
the parameters cell as committed), leaves the checkout as it was: the results database, frames,
plots and fragment go to a run folder in the user data directory, never beside the notebook."""

import fnmatch
import subprocess
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "launch_latency"  # small and quick on the simulated device
# where a notebook run from notebooks/ could leave files: that folder, the shipped profiles, and the
# repository's top folder (a kernel started there)
WATCHED = ["notebooks", "profiles", "calib-runs"]
LITTER = ["results.sqlite*", "*.parquet", "*.png", "fragment-*.json", "*.lock", "*-wal", "*-shm", "run.json"]


def _status() -> set[str]:
    """git's view of the watched paths, untracked and ignored files one by one."""
    pathspecs = WATCHED + [f":(top,glob){pattern}" for pattern in LITTER]
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--ignored", "--", *pathspecs],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return set(out.splitlines())


@pytest.mark.slow
def test_a_notebook_run_in_jupyterlab_leaves_the_checkout_clean(tmp_path, monkeypatch):
    nbclient = pytest.importorskip("nbclient")
    try:
        before = _status()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("needs a git checkout")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the kernel's user data directory

    nb = nbformat.read(ROOT / "notebooks" / f"{NOTEBOOK}.ipynb", as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=600,
                                     resources={"metadata": {"path": str(ROOT / "notebooks")}})
    try:
        client.execute()
        after = _status()
    finally:  # whatever the run left in the checkout goes, so that a failure here litters nothing
        for line in _status() - before:
            path = ROOT / line[3:]
            if (line[:2] in ("??", "!!") and path.is_file() and path.parent in (ROOT, ROOT / "notebooks")
                    and any(fnmatch.fnmatch(path.name, pattern) for pattern in LITTER)):
                path.unlink()

    assert after == before, f"the notebook changed the checkout: {sorted(after ^ before)}"
    text = "".join(str(o.get("text", "")) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "wrote" in text  # it did run to its end and write its fragment, somewhere else
    written = list((tmp_path / "data").rglob(f"fragment-{NOTEBOOK}.json"))
    assert written, f"no fragment in the user data directory {tmp_path / 'data'}"
