"""Figures of an evaluation (``calib heuristics evaluate --json`` output), for the notebook
``notebooks/review/heuristics_review.ipynb``: logic here, under test; the notebook only calls it."""

from __future__ import annotations

from pathlib import Path

from .. import strict_json
from ..errors import CalibError
from .replay import FORMAT, VERSION
# What the figures and evaluate.to_markdown read at the top of an evaluation, and the type each must be
# (None: may also be null); the summaries, predictions and rows inside are checked by _check_evaluation.
FIELDS = {"kind": str, "device": dict, "summary": dict, "prediction": dict, "rows": list, "backend": str,
          "simulated": bool, "created": str, "evaluated": int, "problems": int, "wall_s": (int, float),
          "stopped_early": (str, type(None)), "profile": (str, type(None)), "tuning_database": (str, type(None))}


class ReviewError(CalibError, ValueError):
    """A file that is not an evaluation the review can show: named, with what is wrong."""


def load(path_or_result) -> dict:
    """The evaluation (``calib heuristics evaluate --out PREFIX``'s PREFIX.json) at a path, or a
    result as given. A file that is not one is a ReviewError naming it: a binary file, a folder or a
    problems file had ended the notebook in a UnicodeDecodeError, IsADirectoryError or KeyError."""
    return _load_checked(path_or_result, "evaluation", FORMAT, VERSION, FIELDS,
                         "is not a calib heuristics evaluation (the PREFIX.json of `calib heuristics evaluate "
                         "--out PREFIX`)", _check_evaluation)


def _load_checked(path_or_result, what: str, fmt: str, version: int, fields: dict, not_it: str,
                  check=None) -> dict:
    """A result as given, or the file at a path checked: bounded UTF-8 (a .gz decompressed to the same
    bound), strict JSON, of format ``fmt``, of a version up to ``version``, holding ``fields`` of their
    types, and then what ``check`` (the figures' own reads, field by field) finds wrong in it."""
    if isinstance(path_or_result, dict):
        return path_or_result
    from .registry import read_text

    p = Path(path_or_result)
    text = read_text(p, what, ReviewError)  # a regular file of bounded size, UTF-8
    try:
        res = strict_json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, a 5000-digit number, NaN, deep nesting
        raise ReviewError(f"{what} {p} is not JSON ({str(exc)[:120] or type(exc).__name__})") from None
    if not isinstance(res, dict) or res.get("format") != fmt:
        raise ReviewError(f"{p} {not_it}")
    if isinstance(res.get("version"), bool) or not isinstance(res.get("version"), int) or res["version"] > version:
        raise ReviewError(f"{p} has version {res.get('version')!r}; this calib reads up to {version}")
    bad = [name for name, kind in fields.items()  # a JSON true is no count or time
           if not isinstance(res.get(name), kind) or (isinstance(res.get(name), bool) and kind is not bool)]
    if bad:
        raise ReviewError(f"{what} {p} lacks {', '.join(bad)} (or has them of another type)")
    problem = check(res) if check is not None else None
    if problem:
        raise ReviewError(f"{what} {p}: {problem}"[:300])
    return res


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and strict_json.finite(v)


def _positive(v) -> bool:
    return _number(v) and v > 0


def _interval(v) -> bool:
    return isinstance(v, list) and len(v) == 2 and all(map(_number, v)) and v[0] <= v[1]


def _check_evaluation(res: dict) -> str | None:
    """What the figures and evaluate.to_markdown would trip on, named (None: nothing): a summary or a
    prediction without its numbers, a row that is no object, a time that is no positive number, an
    interval that is no pair. A missing time is a problem not timed, as evaluate writes it (null)."""
    for name in ("heuristic", "baseline", "library"):
        s = res["summary"].get(name)
        if not isinstance(s, dict):
            return f"summary.{name} is {s!r:.40}, not an object"
        if s.get("n"):
            q = s.get("efficiency_quantiles")
            if not (all(_number(s.get(k)) for k in ("geomean_efficiency", "worst_efficiency", "within_3pct"))
                    and isinstance(q, dict) and _number(q.get("p10")) and _number(q.get("p50"))):
                return f"summary.{name} has n = {s['n']!r:.20} but not its efficiencies as numbers"
    for which in ("all", "memory_bound"):
        p = res["prediction"].get(which)
        if not isinstance(p, dict):
            return f"prediction.{which} is {p!r:.40}, not an object"
        if p.get("n"):
            if not all(_number(p.get(k)) for k in ("median_abs_rel_error", "p90_abs_rel_error",
                                                    "worst_abs_rel_error")):
                return f"prediction.{which} has n = {p['n']!r:.20} but not its errors as numbers"
            if any(p.get(k) is not None and not _number(p[k])
                   for k in ("interval_contains_measured", "pi95_contains_measured")):
                return f"prediction.{which} holds a coverage that is no number"
    for i, r in enumerate(res["rows"]):
        if not isinstance(r, dict) or not isinstance(r.get("descriptor"), dict):
            return f"rows[{i}] is not a problem's row (an object with its descriptor)"
        for key in ("best_us", "heuristic_us", "baseline_us", "library_us", "predicted_us"):
            if r.get(key) is not None and not _positive(r[key]):
                return f"rows[{i}].{key} is {r[key]!r:.40}, not a positive number of microseconds"
        if r.get("heuristic_us") is not None and r.get("best_us") is None:
            return f"rows[{i}] times the heuristic's choice but has no best_us"
        for key in ("predicted_ci95", "predicted_pi95"):
            if r.get(key) is not None and not _interval(r[key]):
                return f"rows[{i}].{key} is {r[key]!r:.40}, not a pair of numbers [low, high]"
    return None


def efficiency_figure(res: dict):
    """Sorted efficiency (exhaustive best / time) per problem: heuristic, baseline, library op."""
    import matplotlib.pyplot as plt

    res = load(res)
    fig, ax = plt.subplots(figsize=(7, 4))
    rows = [r for r in res["rows"] if "error" not in r]
    for name, style in (("heuristic", "-"), ("baseline", "--"), ("library", ":")):
        eff = sorted(r["best_us"] / r[f"{name}_us"] for r in rows if r.get(f"{name}_us"))
        s = res["summary"][name]
        label = f"{name}: geomean {s['geomean_efficiency']:.3f}, worst {s['worst_efficiency']:.3f}" if s.get("n") \
            else name
        ax.plot([i / max(len(eff) - 1, 1) for i in range(len(eff))], eff, style, label=label)
    ax.axhline(0.97, color="grey", lw=0.6)
    ax.set_xlabel("share of problems (sorted)")
    ax.set_ylabel("exhaustive best / time of the choice")
    title = f"{res['kind']}: {res['evaluated']} problems on {res['device'].get('name')}"
    ax.set_title(title + (" (SIMULATED DEVICE)" if res.get("simulated") else ""), wrap=True)
    ax.legend(loc="lower left", fontsize=8)
    plt.close(fig)
    return fig


def prediction_figure(res: dict):
    """Predicted against measured time of the heuristic's choice, with the predictor's intervals:
    ``ci95`` (the profile's CIs, dark) and, where the model's recorded error holds for the GPU,
    ``pi95`` (light, wider): the first says how well the profile pins the model, the second where
    the measured time is expected. The title gives how often each held the measured time."""
    import matplotlib.pyplot as plt

    res = load(res)
    rows = [r for r in res["rows"] if r.get("heuristic_us") and r.get("predicted_us")]
    fig, ax = plt.subplots(figsize=(5, 5))

    def bars(name, **style):
        have = [r for r in rows if r.get(name)]
        if have:
            below = [r["predicted_us"] - r[name][0] for r in have]
            above = [r[name][1] - r["predicted_us"] for r in have]
            ax.errorbar([r["heuristic_us"] for r in have], [r["predicted_us"] for r in have], yerr=[below, above],
                        fmt="none", **style)

    bars("predicted_pi95", lw=2.5, color="C0", alpha=0.25, label="pi95 (model's recorded error)")
    bars("predicted_ci95", lw=0.8, color="C0", label="ci95 (profile's CIs)")
    x = [r["heuristic_us"] for r in rows]
    y = [r["predicted_us"] for r in rows]
    ax.plot(x, y, "o", ms=3, color="C0")
    if rows:
        lo, hi = min(x + y), max(x + y)
        ax.plot([lo, hi], [lo, hi], color="grey", lw=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured us")
    ax.set_ylabel("predicted us")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize="small")
    p = res["prediction"]["all"]
    if p.get("n"):
        held = [f"{label} holds {p[key]:.0%}" for key, label in (("interval_contains_measured", "ci95"),
                                                                 ("pi95_contains_measured", "pi95"))
                if p.get(key) is not None]
        ax.set_title(f"{res['kind']}: median |error| {p['median_abs_rel_error']:.1%}, p90 {p['p90_abs_rel_error']:.1%}"
                     + (f"; {', '.join(held)}" if held else "") + (" (SIMULATED)" if res.get("simulated") else ""),
                     wrap=True)
    plt.close(fig)
    return fig


LEARNED_FORMAT = "calib.heuristics.learned_evaluation"  # learned_eval's file
LEARNED_FIELDS = {"backend": str, "sizes_bytes": list, "learning_points_bytes": list, "ops": dict}


def load_learned(path_or_result) -> dict:
    """The learned predictor's evaluation (``python -m calib.heuristics.learned_eval --out PREFIX``'s
    PREFIX.json, gzipped or not) at a path, or as given; anything else a ReviewError naming it."""
    from .learned_eval import FORMAT_VERSION

    return _load_checked(path_or_result, "learned evaluation", LEARNED_FORMAT, FORMAT_VERSION, LEARNED_FIELDS,
                         "is not a learned predictor's evaluation (python -m calib.heuristics.learned_eval --out "
                         "PREFIX writes PREFIX.json)", _check_learned)


def _check_learned(res: dict) -> str | None:
    """What learned_figure and learned_eval.to_markdown would trip on, named (None: nothing)."""
    for key in ("sizes_bytes", "learning_points_bytes"):
        if not all(map(_positive, res[key])):
            return f"{key} holds what is no positive number of bytes"
    n = len(res["sizes_bytes"])
    for name, r in res["ops"].items():
        if not isinstance(r, dict):
            return f"ops[{name!r:.40}] is not an object"
        for key in ("measured_us", "predicted_us"):
            v = r.get(key)
            if not isinstance(v, list) or len(v) != n or not all(map(_positive, v)):
                return f"ops[{name!r:.40}].{key} is not {n} positive times, one per size"
        if r.get("pi95_us") is not None and (not isinstance(r["pi95_us"], list) or len(r["pi95_us"]) != n
                                             or not all(map(_interval, r["pi95_us"]))):
            return f"ops[{name!r:.40}].pi95_us is not {n} pairs [low, high], one per size"
        for key in ("learned", "line_through_three", "roofline", "learned_12"):
            e = r.get(key)
            if (e is not None or key != "learned_12") and not (
                    isinstance(e, dict) and all(_number(e.get(k)) for k in ("median", "p90", "worst"))):
                return f"ops[{name!r:.40}].{key} is not its median, p90 and worst errors as numbers"
        cov = r.get("interval_coverage")  # absent from a file of before 2026-12-07
        if cov is not None and not (isinstance(cov, dict) and all(_number(cov.get(k)) for k in
                                                                  ("pi95", "ci95", "size_scatter_rel"))
                                    and isinstance(cov.get("flags"), list)
                                    and all(isinstance(f, str) for f in cov["flags"])):
            return f"ops[{name!r:.40}].interval_coverage is not its pi95, ci95 and scatter shares and its flags"
    return None


def learned_figure(res):
    """Per op, the learned model's error at each measured size (measured / predicted - 1), its 95%
    prediction interval as a band where the file has one (since 2026-12-07), the issue's 5% as dashed
    lines and the learning points as ticks: where a smooth model cannot follow the op is seen at once."""
    import matplotlib.pyplot as plt

    res = load_learned(res)
    ops = list(res["ops"].items())
    fig, axes = plt.subplots(len(ops), 1, figsize=(7, 2.6 * len(ops)), sharex=True, squeeze=False)
    sizes = res["sizes_bytes"]
    for ax, (name, r) in zip(axes[:, 0], ops):
        err = [100 * (m / p - 1) for m, p in zip(r["measured_us"], r["predicted_us"])]
        if r.get("pi95_us"):
            ax.fill_between(sizes, [100 * (lo / p - 1) for (lo, _), p in zip(r["pi95_us"], r["predicted_us"])],
                            [100 * (hi / p - 1) for (_, hi), p in zip(r["pi95_us"], r["predicted_us"])],
                            color="C0", alpha=0.15, label="95% prediction interval")
        ax.plot(sizes, err, "o-", ms=3, lw=0.8, color="C0", label="measured / predicted - 1")
        for y in (-5, 5):
            ax.axhline(y, color="grey", lw=0.6, ls="--")
        ax.plot(res["learning_points_bytes"], [0] * len(res["learning_points_bytes"]), "|", color="C3", ms=10,
                label="learning points")
        e, cov = r["learned"], r.get("interval_coverage") or {}
        rough = any(str(f).startswith("rough in size") for f in cov.get("flags", ()))
        title = f"{name}: p90 {e['p90']:.1%}, worst {e['worst']:.1%}"
        if cov:
            title += f"; pi95 covers {cov['pi95']:.0%}" + (" (rough in size)" if rough else "")
        ax.set_title(title, fontsize=9)
        ax.set_xscale("log")
        ax.set_ylabel("error %")
    axes[-1, 0].set_xlabel("bytes")
    axes[0, 0].legend(fontsize=7, loc="upper right")
    fig.suptitle(f"learned predictor on library ops ({res['backend']})"
                 + (" (SIMULATED DEVICE)" if res["backend"] == "sim" else ""), fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig
