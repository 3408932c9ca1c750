"""A non-editable install works away from the checkout: the wheel carries the notebooks, the
shipped profiles, the CUDA kernels and the database migrations, and calib finds them there."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _source_files() -> list[str]:
    """What a clean clone plus this working tree's new files hold (not .venv, build output, caches)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("needs a git checkout to know which files are the source")
    return [f for f in out.split("\0") if f and (ROOT / f).is_file()]


def test_every_subpackage_of_calib_is_in_the_package_list():
    """pyproject.toml lists calib's packages by name (it maps notebooks/ and profiles/ into calib):
    a folder of modules missing from that list would be missing from the wheel."""
    tomllib = pytest.importorskip("tomllib")
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed, mapped = set(setuptools["packages"]), setuptools["package-dir"]
    folders = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "calib").rglob("*")
               if p.suffix in (".py", ".cu") and "__pycache__" not in p.parts}
    assert folders <= listed, f"add {sorted(folders - listed)} to [tool.setuptools] packages in pyproject.toml"
    gone = {p for p in listed - folders if not (ROOT / mapped.get(p, p.replace(".", "/"))).is_dir()}
    assert not gone, f"remove {sorted(gone)} from [tool.setuptools] packages in pyproject.toml: no such folder"


@pytest.mark.slow
def test_a_wheel_installed_outside_the_checkout_runs_a_notebook_and_finds_the_shipped_profile(tmp_path):
    # the wheel, built from a copy so that the build leaves nothing in the checkout
    src, dist = tmp_path / "src", tmp_path / "dist"
    files = _source_files()
    for name in files:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(dist), str(src)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = dist.glob("calib-*.whl")

    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    expected = {f for f in files if f.startswith("calib/") and f.endswith((".py", ".cu"))}
    expected |= {"calib/" + f for f in files if f.startswith(("notebooks/", "profiles/")) and f.count("/") == 1
                 and f.endswith((".ipynb", ".json"))}
    assert expected - in_wheel == set(), "the wheel lacks these files"
    assert {"calib/profiles/nvidia-h200.json", "calib/notebooks/launch_latency.ipynb",
            "calib/store/migrations/env.py"} <= in_wheel and any(f.startswith("calib/kernels/") for f in in_wheel)

    # a fresh venv with the wheel alone; the dependencies come from this interpreter's site-packages,
    # named in a .pth file (a folder named there is added to sys.path, but its own .pth files, such as
    # the checkout's editable finder, are not run)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                              "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (Path(site) / "calib-test-dependencies.pth").write_text("".join(f"{p}\n" for p in ours))

    elsewhere = tmp_path / "elsewhere"  # cwd and every output away from the checkout
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"  # a kernelspec naming `python` gets this one

    def run(*cmd, timeout=120):
        return subprocess.run([str(c) for c in cmd], cwd=elsewhere, env=env, capture_output=True, text=True,
                              timeout=timeout)

    probe = run(python, "-c", """
import json, sys
import calib, calib.profile, calib.resources, calib.runner
from calib.store import core
device = json.loads((calib.profile.shipped_profiles_dir() / "nvidia-h200.json").read_text())
found = calib.profile.load_profile(device=device["device"], software=device["software"], strict=True)
print(json.dumps({
    "calib": calib.__file__,
    "editable": [m for m in sys.modules if m.startswith("__editable__")]
                + [repr(f) for f in sys.meta_path if "editable" in repr(f).lower()],
    "notebooks": str(calib.runner.notebooks_dir()),
    "shipped": str(calib.profile.shipped_profiles_dir()),
    "kernels": sorted(p.name for p in calib.resources.kernels_dir().glob("*.cu")),
    "migrations": str(core.MIGRATIONS), "migration_files": len(list(core.MIGRATIONS.rglob("*.py"))),
    "found": [found.origin, str(found.path), len(found)],
}))
""")
    assert probe.returncode == 0, probe.stderr[-3000:]
    got = json.loads(probe.stdout.splitlines()[-1])
    package = Path(got["calib"]).parent
    assert package.is_relative_to(venv), f"calib was imported from {got['calib']}, not from the wheel"
    assert got["editable"] == [], "the checkout's editable install is active in the fresh venv"
    assert Path(got["notebooks"]) == package / "notebooks" and Path(got["shipped"]) == package / "profiles"
    assert got["kernels"] and Path(got["migrations"]).is_relative_to(package) and got["migration_files"] >= 2
    assert got["found"][:2] == ["shipped", str(package / "profiles" / "nvidia-h200.json")] and got["found"][2] > 10

    show = run(venv / "bin" / "calib", "show", package / "profiles" / "nvidia-h200.json", "--no-device-check")
    assert show.returncode == 0 and "NVIDIA H200" in show.stdout, show.stderr[-3000:]

    notebook = "launch_latency" if (ROOT / "notebooks" / "launch_latency.ipynb").exists() else "shared_memory"
    run_dir, profile = tmp_path / "run", tmp_path / "profile.json"
    calib_run = run(venv / "bin" / "calib", "run", "--backend", "sim", "--notebook", notebook, "--run-dir", run_dir,
                    "--profile", profile, "--no-progress", timeout=300)
    assert calib_run.returncode == 0, calib_run.stdout[-3000:] + calib_run.stderr[-3000:]
    assert "SIMULATED" in calib_run.stdout.splitlines()[0]
    doc = json.loads(profile.read_text())
    assert doc["device"]["simulated"] is True and doc["params"]
    folder = run_dir / notebook  # a folder per calibration
    assert (folder / f"fragment-{notebook}.json").exists() and (folder / f"{notebook}.ipynb").exists()
    assert (run_dir / "report.html").is_file() and (run_dir / "profile.json").is_file()  # the report from the wheel
    assert not list(elsewhere.iterdir()), "calib run wrote into its working folder"
