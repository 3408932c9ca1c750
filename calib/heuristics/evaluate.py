"""How close the heuristics come to exhaustive search, problem by problem.

For every problem of a kind (drawn by the family's seeded generator, or read from a JSON-lines
file): every candidate of the family's space is checked against the reference and timed through
the autotune machinery (:meth:`calib.autotune.Autotuner.select`, so the timings land in the tuning
database and a second evaluation on the same device times nothing); then

- ``best``: the fastest measured candidate;
- ``heuristic``: the candidate :func:`calib.heuristics.choose` returns on the profile (all layers:
  a user's registered heuristic is what gets evaluated), its measured time over ``best``; a user's
  heuristic that raises ends the evaluation with :class:`UserHeuristicError` (``calib heuristics
  evaluate``: one line, exit 2), where an answer that is no launch of the family fails its row alone;
- ``baseline``: the static rule's choice (:mod:`calib.heuristics.baselines`), the same ratio;
- ``library``: the op a user would call instead (CuPy's), timed the same way, over ``best``;
- ``predicted``: the predictor's time and 95% interval for the heuristic's choice, against its
  measured time; and ``predicted_pi95``, the interval of the model's measured error
  (:mod:`calib.heuristics.model_error`), where one holds for the profile's GPU.

Ratios are reported as *efficiency* ``best / time`` (1 = as fast as exhaustive search; the issue's
"0.97 of the exhaustive best") and, equivalently, *slowdown* ``time / best``. The geometric mean,
the worst case and quantiles summarize each (:func:`summarize`). Timings of the heuristic's and
baseline's choices are the exhaustive search's own timings of those candidates, so every ratio
compares measurements of one run.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time as _time
from pathlib import Path

from ..errors import CalibError
from .families import family, launch
from .knobs import knobs
from .registry import KINDS, HeuristicError, UserHeuristicError, choose, json_lines, read_text

QUANTILES = (0.05, 0.10, 0.25, 0.50, 0.75, 0.90)


class ProblemFileError(CalibError, ValueError):
    """A problems file that yields no problem at all (each bad line is reported, not fatal)."""


# ----------------------------------------------------------------------------------------------
# arithmetic

def _quantile(sorted_values, p: float) -> float:
    """Linear interpolation between order statistics (numpy's default, ``method="linear"``)."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    h = (n - 1) * p
    lo = math.floor(h)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (h - lo) * (sorted_values[hi] - sorted_values[lo])


def summarize(times, best) -> dict:
    """Efficiency ``best/time`` and slowdown ``time/best`` over problems: geometric means, worst
    cases, quantiles of each, and the share of problems within 3% of the best.

    A problem whose best is known but whose choice has no time (the chosen candidate failed its
    check or could not run) is counted in ``choice_failed``, not in ``n``: leaving it out of the
    means silently would flatter the heuristic, and putting it in as efficiency 0 would make the
    geometric mean 0 and hide everything else."""
    pairs, failed = [], 0
    for t, b in zip(times, best):
        if b is None or not b > 0:
            continue
        if t is None or not t > 0:
            failed += 1
        else:
            pairs.append((t, b))
    if not pairs:
        return {"n": 0, "choice_failed": failed}
    eff = sorted(b / t for t, b in pairs)
    slow = sorted(t / b for t, b in pairs)
    g = math.exp(sum(math.log(e) for e in eff) / len(eff))
    return {"n": len(eff), "choice_failed": failed, "geomean_efficiency": g, "worst_efficiency": eff[0],
            "geomean_slowdown": 1 / g, "worst_slowdown": slow[-1],
            "efficiency_quantiles": {f"p{round(p * 100)}": _quantile(eff, p) for p in QUANTILES},
            "slowdown_quantiles": {f"p{round(p * 100)}": _quantile(slow, p) for p in QUANTILES},
            "within_3pct": sum(s <= 1.03 for s in slow) / len(slow)}


def prediction_errors(rows, *, only_memory_bound: bool = False) -> dict:
    errs = sorted(abs(r["predicted_us"] / r["heuristic_us"] - 1) for r in rows
                  if r.get("predicted_us") and r.get("heuristic_us") and (r["memory_bound"] or not only_memory_bound))
    def contains(name):
        inside = [r[name][0] <= r["heuristic_us"] <= r[name][1] for r in rows
                  if r.get(name) and r.get("heuristic_us") and (r["memory_bound"] or not only_memory_bound)]
        return sum(inside) / len(inside) if inside else None  # None where no row had a finite interval

    if not errs:
        return {"n": 0}
    return {"n": len(errs), "median_abs_rel_error": _quantile(errs, 0.5), "p90_abs_rel_error": _quantile(errs, 0.9),
            "worst_abs_rel_error": errs[-1], "interval_contains_measured": contains("predicted_ci95"),
            # the model-error band's interval (calib.heuristics.model_error), where one holds for the profile
            "pi95_contains_measured": contains("predicted_pi95")}


# ----------------------------------------------------------------------------------------------
# problems

def read_problems(kind: str, path) -> tuple[list, list[str]]:
    """Descriptors from a JSON-lines file, and a line-numbered reason for each line skipped."""
    fam = family(kind)
    p = Path(path)
    text = read_text(p, "problems file", ProblemFileError)
    out, bad, seen = [], [], {}
    for n, obj in json_lines(text, p, bad):
        if isinstance(obj, dict) and obj.get("kind", kind) != kind:
            other = obj["kind"]
            bad.append(f"{p}:{n}: a {other} problem, not {kind}" if other in KINDS else
                       f"{p}:{n}: kind {json.dumps(other)[:40]} is none of {', '.join(KINDS)}")
            continue
        try:
            d = fam.descriptor(obj)
        except HeuristicError as exc:
            bad.append(f"{p}:{n}: {exc}")
            continue
        if d in seen:  # counted once: a problem twice would weigh twice in every mean
            bad.append(f"{p}:{n}: the same problem as line {seen[d]}")
        else:
            seen[d] = n
            out.append(d)
    if not out:
        more = f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""
        why = f": {'; '.join(bad[:5])}{more}" if bad else " (it is empty)"
        raise ProblemFileError(f"problems file {p} has no usable {kind} problem{why}")
    return out, bad


# ----------------------------------------------------------------------------------------------
# the evaluation

def _gpu_rule():
    from ..timing import StoppingRule

    return StoppingRule(min_samples=5, max_samples=20, batch=5, rel_precision=0.01, budget_s=0.02)


class _GpuSetup:
    def __init__(self):
        from ..ops import conv2d

        self.device, self.software = conv2d.cupy_fingerprint()
        self.sm_count = int(self.device["sm_count"])
        self.rule = _gpu_rule()

    def case(self, fam, d):
        return fam.GpuCase(d, self.sm_count)

    def timer(self, thunk):
        """Device time: each batch held behind a GPU spin so that the host runs ahead
        (calib/ops/timer.py). Without it a small problem's candidates all timed CuPy's launch
        path on the host (16-21 us for a 1608-element relu on an H200, 2026-12-01), which no
        launch parameter changes and no predictor of device time can match. L2 stays warm: a
        pointwise or normalization input was usually just written by the op before it."""
        from ..ops.timer import cuda_timer

        return cuda_timer(thunk, rule=self.rule, warmup=3, warmup_s=0.001, hold=True)


def resolve_backend(backend: str) -> str:
    if backend in ("sim", "cupy") or backend.startswith("replay:"):
        return backend
    from ..fingerprint import detect_current

    return "sim" if detect_current() is None else "cupy"



def distinct_problems(generate, count: int, seed: int, gen_kw: dict) -> list:
    """``count`` different problems of the seeded generator: a problem drawn twice (softmax of one
    row of 1296 halves, seed 65) weighed twice in every mean, as one listed twice in a problems file
    would. Each generator draws the same sequence whatever the count, so the first draws of a seed
    stay its problems and a duplicate is replaced by the next new one at the end. Where the bounds
    leave fewer problems than ``count`` (a small ``max_bytes``), what there is: once a larger draw
    finds almost nothing new, or the draws reach five times ``count``."""
    extra, had = 0, 0
    while True:
        drawn = list(dict.fromkeys(generate(count + extra, seed, **gen_kw)))
        if len(drawn) >= count:
            return drawn[:count]
        if extra and (len(drawn) - had <= count // 100 or extra >= 4 * count):
            return drawn
        had, extra = len(drawn), max(2 * extra, count - len(drawn))


def evaluate(kind: str, problems=None, *, backend: str = "sim", count: int = 100, seed: int = 0,
             db: str | None = None, profile=None, sim_spec=None, max_bytes: float | None = None,
             budget_s: float | None = None, progress=None) -> dict:
    """Evaluate ``kind``'s heuristic, baseline and library op against exhaustive search.

    ``problems``: descriptors (default: ``count`` from the family's generator with ``seed``).
    ``db``: the tuning database URL (default: in memory on the simulated device, the user's
    autotune database on a GPU). ``budget_s``: stop starting problems after this much wall time
    (the result says how many were done). ``progress``: a file to print progress lines to.
    ``profile``: what the heuristics read (default: the lookup order's, or the simulated device's own);
    a path is read as ``calib heuristics evaluate --profile`` reads it, an unreadable one a ProfileError
    (an evaluation on the defaults would be mistaken for one on that profile)."""
    from ..autotune import Autotuner
    if isinstance(profile, (str, os.PathLike)):
        from ..profile import read_profile

        profile = read_profile(profile)
    fam = family(kind)  # an unknown kind: HeuristicError
    if problems is not None:  # descriptors, or mappings as in a problems file (HeuristicError if bad)
        problems = [fam.descriptor(p) for p in problems]
    backend = resolve_backend(backend)
    gen_kw = {} if max_bytes is None else {"max_bytes": max_bytes}
    replayed, recorded_failures, not_recorded = None, [], 0
    replay_oracle = contextlib.nullcontext()  # a recording's cuBLASLt answers, while its problems replay
    simulated = backend == "sim"
    if backend.startswith("replay:"):
        from . import replay

        recorded = replay.load(backend[len(replay.PREFIX):], kind)
        replayed = {}
        for r in recorded["rows"]:
            try:
                replayed[fam.descriptor(r["descriptor"])] = r
            except HeuristicError as exc:
                raise replay.ReplayError(f"{backend[len(replay.PREFIX):]}: a recorded row's problem: {exc}") from None
        if problems is not None:  # the given problems that were recorded; the others are counted
            given = problems
            problems = [d for d in given if d in replayed]
            not_recorded = len(given) - len(problems)
        else:
            problems = list(replayed)
            recorded_failures = [{"descriptor": r["descriptor"], "error": f"failed when recorded: {r['error']}"}
                                 for r in recorded["failed_rows"]]
        seed = recorded["seed"] if isinstance(recorded.get("seed"), int) else seed
        simulated = recorded.get("simulated") is True
        if "cublaslt" in recorded:  # the answers Lt gave live: the replay predicts as the GPU did
            from . import cublaslt

            where = f"recorded evaluation {backend[len(replay.PREFIX):]}"
            replay_oracle = cublaslt.use_oracle(cublaslt.oracle_from_asked(recorded["cublaslt"], where))
    short = None
    if problems is None:
        problems = distinct_problems(fam.generate, count, seed, gen_kw)
        if len(problems) < count:
            short = (f"the generator gives {len(problems)} distinct problems, not the {count} asked, within "
                     f"{'max_bytes %.0f' % max_bytes if max_bytes is not None else 'its default bounds'}")
    if replayed is not None:
        device, software = recorded["device"], recorded["software"]
        if profile is None:  # the recorded device's profile by the lookup order, not this machine's
            from ..profile import load_profile

            profile = load_profile(device=device, software=software)
        make_case = lambda d: replay.ReplayCase(replayed[d], simulated=simulated)  # noqa: E731
        timer = None
        persist = False
    elif backend == "sim":
        from ..backends.sim import SimBackend
        from .simdevice import SimCase, sim_profile

        sim = SimBackend(sim_spec, seed=seed)
        device, software = sim.fingerprint()
        profile = profile if profile is not None else sim_profile(sim, seed=seed)
        make_case = lambda d: SimCase(fam, sim, d)  # noqa: E731
        timer = None
        persist = db is not None
    else:
        gpu = _GpuSetup()
        device, software = gpu.device, gpu.software
        if profile is None:
            import calib

            profile = calib.default_profile()
        make_case = lambda d: gpu.case(fam, d)  # noqa: E731
        timer = gpu.timer
        persist = True
    # device time since 2026-12-01 (held batches): entries timed before are stale, not reused as if alike
    timing = "device time, held batches, warm L2" if backend == "cupy" else backend
    tuner = Autotuner(device, software, protocol={"evaluation": "calib heuristics evaluate", "backend": backend,
                                                  "timer": timing},
                      url=db, persist=persist, policy="use")
    started = _time.perf_counter()
    from .predictor import declined_corrections

    from .registry import ReadRecorder

    rec = ReadRecorder(profile)
    with replay_oracle, declined_corrections() as declined:
        rows, stopped_early = _run_problems(fam, kind, problems, make_case, tuner, profile, timer, budget_s,
                                            progress, started)
        # inside a recording's cuBLASLt answers, as its problems were: outside them a replay whose first
        # problem is fp32 warned that no cuBLASLt was at hand
        _parameters_read(fam, [fam.descriptor(r["descriptor"]) for r in rows if "error" not in r] or problems[:1],
                         rec)
    if backend == "cupy":
        _cp_free()
    rows.extend(recorded_failures)
    ok = [r for r in rows if "error" not in r]
    summary = {name: summarize([r[f"{name}_us"] for r in ok], [r["best_us"] for r in ok])
               for name in ("heuristic", "baseline", "library")}
    pred = {"all": prediction_errors(ok), "memory_bound": prediction_errors(ok, only_memory_bound=True)}
    return {"format": "calib.heuristics.evaluation", "version": 1, "kind": kind, "backend": backend,
            "simulated": simulated, "replayed": replayed is not None, "device": device, "software": software,
            "profile": _profile_source(profile), "parameters_read": sorted(rec.names),
            "created": _now(), "seed": seed, "problems": len(problems) + len(recorded_failures), "evaluated": len(ok),
            "failed": len(rows) - len(ok), "stopped_early": stopped_early, "not_recorded": not_recorded,
            "fewer_problems": short,
            "tuning_database": (tuner.db.url if tuner.db is not None else "memory (pass --db to record)"),
            "autotune_counters": tuner.counters.as_dict(), "wall_s": _time.perf_counter() - started,
            "corrections_declined": sorted(declined), "corrections_borrowed": sorted(declined.borrowed),
            "summary": summary, "prediction": pred, "rows": rows,
            **_lt_answers(kind, backend)}


def _parameters_read(fam, problems, rec):
    """Ask the built-in heuristic about one problem through ``rec`` (a ReadRecorder), to list the
    parameters it reads: the first problem that evaluated, so that one a model cannot take (it
    failed as a row) does not end the evaluation here."""
    for d in problems[:1]:
        try:
            fam.heuristic(d, rec)
        except CalibError:  # recorded as the row's failure already
            pass


def _lt_answers(kind: str, backend: str) -> dict:
    """{"cublaslt": the answers cuBLASLt gave live} for a split-K evaluation on a GPU (the predictions
    read them; a replay of the file reads them back), else nothing."""
    if kind != "matmul_splitk" or backend != "cupy" or "calib.heuristics.cublaslt" not in sys.modules:
        return {}
    return {"cublaslt": sys.modules["calib.heuristics.cublaslt"].asked()}


def _run_problems(fam, kind, problems, make_case, tuner, profile, timer, budget_s, progress, started):
    """(rows, why it stopped early or None): each problem measured, chosen and predicted in turn."""
    from .baselines import BASELINES
    from .predictor import predict_model

    rows, stopped_early = [], None
    for i, d in enumerate(problems):
        if budget_s is not None and _time.perf_counter() - started > budget_s:
            stopped_early = f"time budget of {budget_s:g} s spent after {i} of {len(problems)} problems"
            break
        case = make_case(d)
        try:
            rows.append(_one(fam, kind, d, case, tuner, profile, timer, BASELINES[kind], predict_model))
        except UserHeuristicError:  # a bug in the user's code: stop, and say whose (the cause has its traceback)
            raise
        except Exception as exc:  # noqa: BLE001 - one problem that cannot run costs only itself
            if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
                rows.append({"descriptor": _desc(d), "error": f"out of memory: {exc}"})
            elif isinstance(exc, CalibError):
                rows.append({"descriptor": _desc(d), "error": str(exc)})
            else:
                raise
        finally:
            case.free()
        if progress is not None and (i + 1) % max(1, len(problems) // 10) == 0:
            print(f"calib heuristics evaluate {kind}: {i + 1}/{len(problems)} problems, "
                  f"{_time.perf_counter() - started:.1f} s", file=progress, flush=True)
    return rows, stopped_early


def _finite(x: float) -> float | None:
    """``x``, or None where it is infinite or NaN (no such number in JSON, and no prediction)."""
    return x if math.isfinite(x) else None


def _cp_free():
    try:
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
    except Exception:  # noqa: BLE001
        pass


def _desc(d) -> dict:
    import dataclasses

    return {k: v for k, v in dataclasses.asdict(d).items() if not k.startswith("_")}


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _profile_source(profile) -> str:
    path = getattr(profile, "path", None)
    return str(path) if path else getattr(profile, "origin", type(profile).__name__)


def _one(fam, kind, d, case, tuner, profile, timer, baseline, predict_model) -> dict:
    from . import model_error
    from .predictor import q_of

    cands = fam.space(d)
    if timer is None:
        time_fn = case.time
    else:
        time_fn = lambda k: timer(lambda: case.run(k))  # noqa: E731
    sel = tuner.select(fam.FAMILY, d, cands, time=time_fn, check=case.check)
    entry = tuner.entry(fam.FAMILY, d)
    timings = entry.timings if entry is not None else {}
    usable = {c: t.time_us for c, t in timings.items() if t.usable}
    if not usable:
        raise HeuristicError(f"no candidate of {fam.FAMILY} ran for {d}")
    best_id = min(usable, key=usable.get)
    by_id = {c.autotune_name: c for c in cands}

    def measured(k) -> float | None:
        """The time of a chosen candidate; None where it cannot be used (wrong, unsupported)."""
        cid = knobs(k).autotune_name
        if cid in usable:
            return usable[cid]
        if cid in timings:  # wrong or unsupported: it cannot be used
            return None
        try:  # outside the space (a user's heuristic): checked and timed on its own, as the tuner does
            case.check(knobs(k))
            return float(time_fn(knobs(k)).center_us)
        except MemoryError:
            raise
        except Exception:  # noqa: BLE001 - a wrong or unlaunchable choice is the heuristic's failure
            return None

    try:  # a user's heuristic or override that names no launch of the family: its choice failed
        h, choice_error = launch(kind, choose(kind, d, profile), d), None
    except UserHeuristicError:  # one that raised is no choice but a bug in it, and ends the evaluation
        raise
    except HeuristicError as exc:
        h, choice_error = None, str(exc)
    b = baseline(d, profile)
    lib = case.library() if timer is None else timer(case.library())
    pred = predict_model(fam.model_us, d, h, profile) if h is not None else None
    ci = [_finite(x) for x in pred.ci95] if pred is not None and math.isfinite(pred.time_us) else None
    pi = model_error.pi95(kind, q_of(profile), pred.time_us, pred.ci95) if ci and None not in ci else None
    return {"descriptor": _desc(d), "key": sel.descriptor_key, "candidates": len(cands),
            "usable": len(usable), "best": dict(by_id.get(best_id, {})) or best_id, "best_us": usable[best_id],
            "winner": sel.candidate, "heuristic": dict(h) if h is not None else None,
            "heuristic_us": measured(h) if h is not None else None,
            **({"heuristic_error": choice_error} if choice_error else {}), "baseline": dict(b),
            "baseline_us": measured(b), "library_us": float(lib.center_us),
            "predicted_us": _finite(pred.time_us) if pred is not None else None,
            "predicted_ci95": ci if ci and None not in ci else None,
            "predicted_pi95": [_finite(x) for x in pi] if pi is not None else None,
            "memory_bound": bool(d.memory_bound),
            # every usable candidate's time: the row replays offline (calib.heuristics.replay)
            "times_us": {c: usable[c] for c in sorted(usable)}}


# ----------------------------------------------------------------------------------------------
# reports

def _fmt(s: dict) -> str:
    failed = s.get("choice_failed", 0)
    if not s.get("n"):
        return f"| – | – | – | – | – | {failed} |"
    q = s["efficiency_quantiles"]
    return (f"| {s['geomean_efficiency']:.3f} | {s['worst_efficiency']:.3f} | {q['p10']:.3f} | {q['p50']:.3f} | "
            f"{s['within_3pct']:.0%} | {failed} |")


def to_markdown(res: dict) -> str:
    lines = [f"## {res['kind']} on {res['device'].get('name')} ({res['backend']}"
             f"{', SIMULATED' if res['simulated'] else ''}"
             f"{', REPLAYED from recorded times' if res.get('replayed') else ''}), {res['created']}", "",
             f"{res['evaluated']} of {res['problems']} problems evaluated in {res['wall_s']:.1f} s"
             f"{'; ' + res['stopped_early'] if res['stopped_early'] else ''}"
             f"{'; ' + res['fewer_problems'] if res.get('fewer_problems') else ''}"
             f"{'; %d given problems not in the recording' % res['not_recorded'] if res.get('not_recorded') else ''}"
             f"; profile: {res['profile']}; "
             f"tuning database: {res['tuning_database']}.", "",
             *[f"Not applied, the plain model predicted instead: {c}." for c in res.get("corrections_declined", [])],
             *([""] if res.get("corrections_declined") else []),
             *[f"Applied from another GPU of the same architecture: {c}." for c in res.get("corrections_borrowed", [])],
             *([""] if res.get("corrections_borrowed") else []),
             "Efficiency = exhaustive best / time of the choice (1 = the best).", "",
             "| choice | geomean | worst | p10 | median | within 3% | choice failed |", "|---|---|---|---|---|---|---|"]
    for name, label in (("heuristic", "profile-driven heuristic"), ("baseline", "static baseline"),
                        ("library", "library op (CuPy)")):
        lines.append(f"| {label} " + _fmt(res["summary"][name]))
    lines.append("")
    for which, label in (("all", "all problems"), ("memory_bound", "memory-bound problems")):
        p = res["prediction"][which]
        if p.get("n"):
            lines.append(f"- predictor vs measured ({label}, {p['n']}): median |error| "
                         f"{p['median_abs_rel_error']:.1%}, "
                         f"p90 {p['p90_abs_rel_error']:.1%}, worst {p['worst_abs_rel_error']:.1%}; " + (
                             f"the 95% interval contains the measured time in {p['interval_contains_measured']:.0%}"
                             if p["interval_contains_measured"] is not None else "no finite 95% interval") + (
                             f", the model-error interval (pi95) in {p['pi95_contains_measured']:.0%}"
                             if p.get("pi95_contains_measured") is not None else ""))
    timed = [r for r in res["rows"] if r.get("heuristic_us")]
    worst = sorted(timed, key=lambda r: r["best_us"] / r["heuristic_us"])[:3]
    if worst:
        lines += ["", "Worst problems for the heuristic:", ""]
        for r in worst:
            lines.append(f"- {r['descriptor']}: chose {r['heuristic']} at {r['heuristic_us']:.4g} us; best {r['best']} "
                         f"at {r['best_us']:.4g} us ({r['best_us'] / r['heuristic_us']:.3f})")
    return "\n".join(lines) + "\n"


def print_table(res: dict, out=sys.stdout):
    out.write(to_markdown(res))
