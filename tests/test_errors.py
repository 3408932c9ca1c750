"""One exception base: every error calib raises on purpose is a CalibError, and the CLI turns one
into a one-line message and exit status 2, while a bug keeps its traceback."""

import ast
import builtins
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import calib
from calib.errors import CalibError

PACKAGE = Path(calib.__file__).resolve().parent


def _is_builtin_exception(name: str) -> bool:
    obj = getattr(builtins, name, None)
    return isinstance(obj, type) and issubclass(obj, BaseException) and not issubclass(obj, Warning)


def _error_classes() -> list[tuple[str, str]]:
    """(module, class) of every top-level class in calib's source that derives from an exception,
    found by reading the source, so that a new error class is checked without being listed here."""
    classes = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
                classes.append((module, node.name, bases))
    errors: dict[str, str] = {}
    changed = True
    while changed:  # a class deriving from a calib error class is one too
        changed = False
        for module, name, bases in classes:
            if name in errors or name == "CalibError":
                continue
            if any(_is_builtin_exception(b) or b in errors or b == "CalibError" or b.endswith(("Error", "Exception"))
                   for b in bases):
                errors[name] = module
                changed = True
    return sorted((module, name) for name, module in errors.items())


# Raised for a bug in calib itself, never for a user's input: these keep their traceback, so they
# are deliberately not CalibErrors.
BUGS = {"CalibrationDefinitionError"}

ERRORS = [(module, name) for module, name in _error_classes() if name not in BUGS and not name.startswith("_")]


def test_the_known_error_classes_are_found():
    names = {name for _, name in ERRORS}
    assert {"ProfileError", "MissingParameterError", "RunError", "StoreError", "DeviceOutOfMemory",
            "UnsupportedConfig", "SimSpecError", "MissingDependency"} <= names


@pytest.mark.parametrize("module, name", ERRORS, ids=[f"{m}.{n}" for m, n in ERRORS])
def test_every_error_class_is_a_calib_error(module, name):
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, CalibError), f"{module}.{name} does not derive from calib.errors.CalibError"


def test_the_old_bases_still_catch():
    from calib._optional import MissingDependency
    from calib.backends.base import DeviceOutOfMemory, UnsupportedConfig
    from calib.runner import RunError

    assert issubclass(calib.ProfileError, ValueError) and issubclass(calib.MissingParameterError, KeyError)
    assert issubclass(RunError, RuntimeError) and issubclass(MissingDependency, ImportError)
    assert issubclass(DeviceOutOfMemory, MemoryError) and issubclass(UnsupportedConfig, ValueError)
    assert calib.CalibError is CalibError


def test_cli_turns_any_calib_error_into_one_line_and_exit_2(monkeypatch, capsys, fixture_path):
    from calib import cli

    def refuse(args):
        raise calib.ProfileError("the profile is not usable: a reason")

    monkeypatch.setattr(cli, "_cmd_show", refuse)
    assert cli.main(["show", str(fixture_path("good_h200.json"))]) == 2
    err = capsys.readouterr().err
    assert err == "calib show: error: the profile is not usable: a reason\n"


def test_cli_lets_a_bug_keep_its_traceback(monkeypatch):
    from calib import cli

    def bug(args):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(cli, "_cmd_show", bug)
    with pytest.raises(ZeroDivisionError):
        cli.main(["show"])


def test_cli_error_in_a_fresh_process_is_exit_2_without_traceback(fixture_path):
    out = subprocess.run([sys.executable, "-m", "calib", "query", "memory.dram.read_bandwidth_gbps", "--strict",
                          "--profile", str(fixture_path("truncated.json")), "--no-device-check"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "truncated" in errors[0]
