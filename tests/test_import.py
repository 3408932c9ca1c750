"""`import calib` is what heuristics pay at start-up: no GPU library, no scientific stack."""

import json
import subprocess
import sys


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def test_import_calib_pulls_in_no_gpu_library_nor_numpy():
    mods = _modules_after("import calib")
    assert not {"cupy", "cupy_backends", "torch", "pynvml"} & mods
    assert not {"numpy", "pandas", "statsmodels", "sqlalchemy", "matplotlib"} & mods


def test_backend_selection_and_sim_do_not_import_cupy():
    mods = _modules_after("from calib.backends import get_backend\nb = get_backend('sim')\nb.measure([])")
    assert "cupy" not in mods


def test_cupy_backend_without_cupy_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_cupy(name, *args, **kwargs):
        if name == "cupy" or name.startswith("cupy."):
            raise ImportError("No module named 'cupy'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cupy)
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    from calib._optional import MissingDependency
    from calib.backends.cupy_backend import CupyBackend

    try:
        CupyBackend()
    except MissingDependency as exc:
        assert "calib[cuda13]" in str(exc) and "cupy" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("CupyBackend() without cupy must fail with the extra to install")


def test_import_calib_leaves_the_rest_of_the_stack_and_the_file_helpers_for_later():
    # what heuristics pay at every start-up: the scientific stack, and the helpers only writers,
    # the lookup of the user folder or a missing name need (bench/query_speed.py measures the time)
    mods = _modules_after("import calib")
    assert not {"scipy", "cupy", "platformdirs", "filelock", "difflib", "calib.catalogue"} & mods


def test_public_subpackages_are_attributes_of_calib_yet_not_imported_by_it():
    """The README writes ``import calib`` then ``calib.autotune.descriptor_key(d)``: the public
    subpackages load on first use of their name, and ``import calib`` alone stays light."""
    mods = _modules_after("import calib\nassert calib.autotune.descriptor_key({'n': 1})\n"
                          "assert calib.heuristics.choose and calib.predict.predict and calib.ops")
    assert not {"cupy", "numpy", "pandas", "statsmodels", "sqlalchemy", "matplotlib"} & mods
    assert "calib.autotune" not in _modules_after("import calib")
