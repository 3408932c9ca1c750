"""What a heuristic pays to read the machine profile, on the CPU: a benchmark, not a test.

Heuristics call ``query`` in their hot path and ``import calib`` at every start-up, so issue 9
set targets for both. This script measures each against its target and prints a table:

- ``Profile.query`` and ``calib.query`` per call, for a parameter the profile has: timeit over
  many calls, the median of repeats.
- reading and loading the shipped profile (``profiles/nvidia-h200.json``), each in a fresh
  process (the import of calib is done first and not counted; the lazy imports that reading
  triggers, such as ``json``, are counted), the median of repeated processes.
- ``import calib`` in a fresh process, timed with ``time.perf_counter`` around the import
  inside ``python -c``, the median of repeated processes; once as this environment runs it
  (where ``PYTHONDONTWRITEBYTECODE`` is set, calib's own modules are compiled from source in
  every process) and once with bytecode caches (a private ``-X pycache_prefix`` folder, warmed
  by one discarded run), which is what an installed calib does.

What "loading" means here. ``read_profile(path)`` parses, migrates and validates one file.
``load_profile(path, device=None, software=None)`` adds the lookup and the checks it skips
without a fingerprint. ``load_profile(device=..., software=...)`` walks the whole lookup order
(``CALIB_PROFILE``, the user folder, the shipped profiles) and compares fingerprints, given the
H200's fingerprint as recorded in the file. None of these include detecting this machine's GPU
(``device="auto"``): that asks NVML or spawns ``nvidia-smi``, which costs what the driver costs
(tens of milliseconds for ``nvidia-smi``), not what calib does; it happens once per process
(``calib.fingerprint.detect_current`` is cached) and only on the first ``calib.query``. The
informational row "first calib.query" shows the whole first call on this machine, detection
included, with ``CALIB_PROFILE`` naming the shipped profile so that the call is a hit (on a
machine without a GPU, detection finds neither NVML nor nvidia-smi, so there it costs little).

Usage: ``python bench/query_speed.py [--out FILE.md] [--runs N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import timeit
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME = "memory.dram.read_bandwidth_gbps"
MISSING = "memory.dram.not_a_parameter_gbps"

TARGET_QUERY_US = 1.0
TARGET_MODULE_QUERY_US = 2.0
TARGET_LOAD_MS = 5.0
TARGET_IMPORT_MS = 20.0


def shipped_profile() -> Path:
    from calib.profile import shipped_profiles_dir

    return shipped_profiles_dir() / "nvidia-h200.json"


def per_call_us(stmt: str, namespace: dict, *, calls: int, repeats: int) -> float:
    """Median over ``repeats`` of the mean time of one call, over ``calls`` calls, in µs."""
    timer = timeit.Timer(stmt, globals=namespace)
    timer.timeit(calls // 10)  # warm up
    return statistics.median(t / calls * 1e6 for t in timer.repeat(repeat=repeats, number=calls))


def in_process_rows(path: Path, calls: int, repeats: int) -> list[tuple[str, float, float | None, str]]:
    import calib
    from calib.profile import read_profile

    rows = []
    profile = read_profile(path)
    ns = {"p": profile, "N": NAME, "M": MISSING, "calib": calib}
    rows.append(("Profile.query, a parameter it has (per call)",
                 per_call_us("p.query(N, 1300.0)", ns, calls=calls, repeats=repeats), TARGET_QUERY_US, "µs"))

    os.environ["CALIB_PROFILE"] = str(path)
    calib.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        calib.query(NAME, 1300.0)  # the first call loads the default profile; not counted here
        rows.append(("calib.query, a parameter it has (per call)",
                     per_call_us("calib.query(N, 1300.0)", ns, calls=calls, repeats=repeats),
                     TARGET_MODULE_QUERY_US, "µs"))
        profile.query(MISSING, 1.0)  # its one warning
        rows.append(("Profile.query, a missing name after its one warning (per call)",
                     per_call_us("p.query(M, 1.0)", ns, calls=calls, repeats=repeats), None, "µs"))
    calib.reset()
    del os.environ["CALIB_PROFILE"]
    return rows


def _child_env(**extra) -> dict:
    env = dict(os.environ)
    env.pop("CALIB_PROFILE", None)
    env.update(extra)
    return env


def fresh_process_ms(code: str, runs: int, *, env: dict | None = None, args: tuple = ()) -> float:
    """Median of what ``code`` prints (seconds, as its last line) over ``runs`` fresh processes, in ms.

    One extra run first is discarded: it warms the page cache (and the bytecode cache, if any).
    """
    samples = []
    for i in range(runs + 1):
        out = subprocess.run([sys.executable, *args, "-c", code], capture_output=True, text=True, env=env,
                             cwd=ROOT, check=True)
        if i:
            samples.append(float(out.stdout.strip().splitlines()[-1]) * 1e3)
    return statistics.median(samples)


TIMED = """
import time, warnings
import calib
from calib.profile import read_profile, load_profile
{setup}
t = time.perf_counter()
{stmt}
print(time.perf_counter() - t)
"""


def fresh_process_rows(path: Path, runs: int) -> list[tuple[str, float, float | None, str]]:
    doc = json.loads(path.read_text())
    device, software = doc.get("device") or {}, doc.get("software") or {}
    rows = []
    env = _child_env()
    with tempfile.TemporaryDirectory() as tmp:
        # an empty user folder, so that the lookup order ends at the shipped profile
        lookup_env = _child_env(XDG_DATA_HOME=str(Path(tmp) / "xdg-data"))
        cases = [
            ("read_profile(shipped) in a fresh process", "", f"read_profile({str(path)!r})", env, TARGET_LOAD_MS),
            ("load_profile(shipped, device=None, software=None) in a fresh process", "",
             f"load_profile({str(path)!r}, device=None, software=None)", env, TARGET_LOAD_MS),
            ("load_profile(), whole lookup order to the shipped profile, H200 fingerprint given, "
             "in a fresh process", f"device, software = {device!r}, {software!r}",
             "load_profile(device=device, software=software)", lookup_env, TARGET_LOAD_MS),
            ("first calib.query in a fresh process, CALIB_PROFILE=shipped (this machine's GPU detection "
             "included)", "", f"calib.query({NAME!r}, 1300.0)", _child_env(CALIB_PROFILE=str(path)), None),
        ]
        for what, setup, stmt, case_env, target in cases:
            rows.append((what, fresh_process_ms(TIMED.format(setup=setup, stmt=stmt), runs, env=case_env), target,
                         "ms"))

        import_code = "import time\nt = time.perf_counter()\nimport calib\nprint(time.perf_counter() - t)"
        as_is = "with bytecode caches" if not sys.flags.dont_write_bytecode and "PYTHONDONTWRITEBYTECODE" not in env \
            else "as this environment runs it: PYTHONDONTWRITEBYTECODE set, calib compiled from source"
        rows.append((f"import calib in a fresh process ({as_is})", fresh_process_ms(import_code, runs, env=env),
                     TARGET_IMPORT_MS, "ms"))
        cached_env = dict(env)
        cached_env.pop("PYTHONDONTWRITEBYTECODE", None)
        rows.append(("import calib in a fresh process (bytecode cached, as an installed calib)",
                     fresh_process_ms(import_code, runs, env=cached_env,
                                      args=("-X", f"pycache_prefix={Path(tmp) / 'pycache'}")),
                     TARGET_IMPORT_MS, "ms"))
    return rows


def machine() -> str:
    cpu = ""
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        fields = dict(line.split(":", 1) for line in lscpu.splitlines() if ":" in line)
        cpu = fields.get("Model name", "").strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return (f"{cpu or platform.processor() or 'unknown CPU'}, {os.cpu_count()} CPUs visible, "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()} ({sys.executable})")


def machine_details() -> str:
    """``nproc`` and the head of ``lscpu``, verbatim, for the results file."""
    out = [f"$ nproc\n{os.cpu_count()}"]
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        out.append("$ lscpu | head\n" + "\n".join(lscpu.splitlines()[:10]))
    except (OSError, subprocess.CalledProcessError):
        pass
    out.append(f"$ python -V\nPython {platform.python_version()}")
    return "\n".join(out)


def table(rows) -> str:
    lines = ["| what | median | target | ok |", "|---|---:|---:|:---:|"]
    for what, value, target, unit in rows:
        shown = f"{value:.3f} {unit}" if unit == "µs" else f"{value:.2f} {unit}"
        goal = f"≤ {target:g} {unit}" if target is not None else "—"
        ok = "—" if target is None else ("yes" if value <= target else "NO")
        lines.append(f"| {what} | {shown} | {goal} | {ok} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", metavar="FILE", help="also write the table, with the machine, as markdown")
    ap.add_argument("--runs", type=int, default=15, help="fresh processes per process-level row (default 15)")
    ap.add_argument("--calls", type=int, default=200_000, help="calls per timeit repeat (default 200000)")
    ap.add_argument("--repeats", type=int, default=15, help="timeit repeats (default 15)")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(ROOT))  # the calib of this checkout, also when run as a script
    path = shipped_profile()
    rows = in_process_rows(path, args.calls, args.repeats) + fresh_process_rows(path, args.runs)
    text = table(rows)
    print(f"machine: {machine()}\nprofile: {path}\n")
    print(text)
    missed = [r for r in rows if r[2] is not None and r[1] > r[2]]
    if args.out:
        Path(args.out).write_text(
            f"# calib query speed on the CPU\n\n"
            f"Measured by `python bench/query_speed.py --out {args.out}` "
            f"(runs={args.runs}, calls={args.calls}, repeats={args.repeats}).\n\n"
            f"- machine: {machine()}\n- profile: `{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}`\n\n"
            f"{text}\n\n```\n{machine_details()}\n```\n")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
