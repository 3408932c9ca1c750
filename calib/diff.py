"""``calib diff A B``: two profiles side by side, and whether each parameter changed.

Two questions per parameter, answered separately because on a GPU they part ways:

- **Significant**: is the difference more than the two measurements' own uncertainty explains?
  A z-test on the difference of the two estimates, each standard error taken from its 95% CI
  (half-width / 1.96), combined as ``sqrt(se_a² + se_b²)``; two-sided, at ``alpha`` (5%). This is
  not "do the CIs overlap": two CIs can overlap while the difference is significant (the
  combined error is ``sqrt(2)`` of one, not two of them).

  CIs inverted from a slope (every bandwidth and throughput) are asymmetric: the rate is the
  reciprocal of a symmetric slope interval. Where a value and its CI are positive, the test is on
  the logarithm, where such a CI is nearly symmetric: ``se = (ln hi - ln lo) / (2 × 1.96)`` and
  the difference is ``ln b - ln a`` (a ratio, like the material test). Otherwise (a value or CI
  at or below zero) it is on the value itself, with each CI's half-width on the side that faces
  the other estimate. A record without a CI counts as exact; two without CIs cannot be tested
  (``significant`` is then None).
- **Material**: is the change big enough to matter? asv's factor: B / A above ``1 + threshold``
  or below ``1 / (1 + threshold)`` (default 5%), symmetric in the ratio.

On a GPU that times to ±0.1%, nearly every difference between two runs is significant; only a
material one is worth a heuristic's attention. For CI pipelines, ``--fail-on significant`` exits 1
when any parameter in both profiles differs significantly, ``--fail-on material`` when any differs
both significantly and materially (a large ratio within the noise is no evidence of a change;
where neither record has a CI, material alone decides). A yes/no parameter that flipped has no
noise to be within and no ratio to fall short of: it fails under either.
"""

from __future__ import annotations

import math

from . import fingerprint as fp
from .errors import CalibError

Z95 = 1.959963984540054
DEFAULT_THRESHOLD = 0.05
DEFAULT_ALPHA = 0.05


class DiffError(CalibError, ValueError):
    """A profile to compare cannot be read; the message names the file and why."""


# ----------------------------------------------------------------------------------------------
# the statistics, shared with calib verify


def _positive(value, ci) -> bool:
    return value > 0 and (ci is None or (ci[0] > 0 and ci[1] > 0))


def compare_estimates(a: float, ci_a, b: float, ci_b, *, threshold: float = DEFAULT_THRESHOLD,
                      alpha: float = DEFAULT_ALPHA) -> dict:
    """The test of B against A: ``ratio`` (B / A), ``z``, two-sided ``p``, ``significant``
    (p < alpha; None when neither has a CI), ``material`` (asv's factor), ``scale`` ("log" or
    "linear") and the standard errors used."""
    ci_a = tuple(ci_a) if ci_a else None
    ci_b = tuple(ci_b) if ci_b else None
    ratio = b / a if a != 0 else (math.inf if b > 0 else -math.inf if b < 0 else 1.0)
    if _positive(a, ci_a) and _positive(b, ci_b):
        scale = "log"
        se_a = (math.log(ci_a[1]) - math.log(ci_a[0])) / (2 * Z95) if ci_a else 0.0
        se_b = (math.log(ci_b[1]) - math.log(ci_b[0])) / (2 * Z95) if ci_b else 0.0
        delta = math.log(b) - math.log(a)
        material = ratio > 1 + threshold or ratio < 1 / (1 + threshold)
    else:
        scale = "linear"
        up = b >= a  # each CI's half-width on the side that faces the other estimate
        se_a = ((ci_a[1] - a) if up else (a - ci_a[0])) / Z95 if ci_a else 0.0
        se_b = ((b - ci_b[0]) if up else (ci_b[1] - b)) / Z95 if ci_b else 0.0
        delta = b - a
        material = abs(delta) > threshold * abs(a) if a != 0 else delta != 0
    se = math.sqrt(max(se_a, 0.0) ** 2 + max(se_b, 0.0) ** 2)
    if ci_a is None and ci_b is None:
        z = p = significant = None
    elif se == 0:
        z = 0.0 if delta == 0 else math.copysign(math.inf, delta)
        p = 1.0 if delta == 0 else 0.0
        significant = delta != 0
    else:
        z = delta / se
        p = math.erfc(abs(z) / math.sqrt(2))
        significant = p < alpha
    return {"ratio": ratio, "z": z, "p": p, "significant": significant, "material": bool(material),
            "scale": scale, "se_a": se_a, "se_b": se_b}


# ----------------------------------------------------------------------------------------------
# two profiles


def _open(path):
    from .profile import Profile, ProfileError, read_profile

    if isinstance(path, Profile):
        return path
    try:
        return read_profile(path)
    except ProfileError as exc:
        raise DiffError(str(exc)) from None


def _fingerprint_rows(a, b) -> list[dict]:
    rows = []
    kinds = {**{f: "other" for f in (*a.device, *b.device)}, **{f: "condition" for f in fp.CONDITION_FIELDS},
             **{f: "hard" for f in fp.HARD_FIELDS}}
    order = {"hard": 0, "condition": 1, "other": 3}
    for field in sorted(set(a.device) | set(b.device), key=lambda f: (order[kinds[f]], f)):
        va, vb = a.device.get(field), b.device.get(field)
        if field in a.device and field in b.device and fp._same(field, va, vb):
            continue
        rows.append({"section": "device", "field": field, "kind": kinds[field], "a": va, "b": vb})
    for field in sorted(set(a.software) | set(b.software), key=lambda f: (f not in fp.SOFT_FIELDS, f)):
        va, vb = a.software.get(field), b.software.get(field)
        if field in a.software and field in b.software and str(va) == str(vb):
            continue
        rows.append({"section": "software", "field": field, "kind": "soft" if field in fp.SOFT_FIELDS else "other",
                     "a": va, "b": vb})
    rows.sort(key=lambda r: {"hard": 0, "soft": 1, "condition": 2, "other": 3}[r["kind"]])
    return rows


def _side(p) -> dict:
    return {"value": p.value, "ci95": list(p.ci95) if p.ci95 else None, "unit": p.unit, "flags": list(p.flags)}


def diff_profiles(a, b, *, threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA) -> dict:
    """Compare profile B against A (paths or Profiles): a JSON-ready dict (no NaN or infinity)."""
    if not (isinstance(threshold, (int, float)) and threshold >= 0 and math.isfinite(threshold)):
        raise DiffError(f"the threshold must be a non-negative fraction (0.05 is 5%), not {threshold!r}")
    if not 0 < alpha < 1:
        raise DiffError(f"alpha must lie between 0 and 1, not {alpha!r}")
    pa, pb = _open(a), _open(b)
    from .profile import Parameter

    ra, rb = pa.parameters(), pb.parameters()
    rows = []
    for name in sorted(set(ra) & set(rb)):
        x, y = ra[name], rb[name]
        row = {"name": name}
        if not isinstance(x, Parameter) or not isinstance(y, Parameter):
            row["unusable"] = "; ".join(f"{side}: {r}" for side, r in (("A", x), ("B", y))
                                        if not isinstance(r, Parameter))
            rows.append(row)
            continue
        row.update(unit=y.unit or x.unit, a=_side(x), b=_side(y))
        if x.unit and y.unit and x.unit != y.unit:
            row["unusable"] = f"units differ: {x.unit} in A, {y.unit} in B"
        elif isinstance(x.value, bool) or isinstance(y.value, bool):
            row.update(changed=x.value != y.value)
        else:
            row.update(compare_estimates(x.value, x.ci95, y.value, y.ci95, threshold=threshold, alpha=alpha))
        rows.append(row)
    doc = {
        "a": _about(pa), "b": _about(pb), "threshold": threshold, "alpha": alpha,
        "fingerprint": _fingerprint_rows(pa, pb),
        "params": rows,
        "only_in_a": sorted(set(ra) - set(rb)),
        "only_in_b": sorted(set(rb) - set(ra)),
    }
    doc["summary"] = {"compared": sum(1 for r in rows if "ratio" in r),
                      "significant": sum(1 for r in rows if r.get("significant")),
                      "material": sum(1 for r in rows if r.get("material")),
                      "significant_and_material": sum(1 for r in rows if r.get("significant") and r.get("material")),
                      "flipped": sum(1 for r in rows if r.get("changed"))}
    return _finite(doc)


def _about(p) -> dict:
    return {"path": str(p.path) if p.path else None, "device": p.device.get("name"),
            "simulated": p.simulated, "created": p.created, "params": len(p)}


def _finite(value):
    """JSON has no NaN or infinity: such a number becomes None (an infinite ratio, a z of a
    difference between two exact values)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def failed(doc: dict, fail_on: str | None) -> list[str]:
    """Names of the parameters that make ``--fail-on`` fail: ``significant`` (the difference is
    beyond the measurements' uncertainty) or ``material`` (significant and beyond the threshold:
    a change within the noise is no change, however large its ratio). Under either, a parameter of
    both profiles that could not be compared (NaN or infinite in one, units that differ) fails too:
    a gate that passed on a corrupt profile would be a check that cannot fail. A yes/no parameter
    that flipped fails under either: it is exact, so the change is beyond any noise, and a flip
    is as large as a change of it can be."""
    if not fail_on:
        return []
    broken = [r["name"] for r in doc["params"] if "unusable" in r]  # doc["not_compared"] names them too
    flipped = [r["name"] for r in doc["params"] if r.get("changed")]
    if fail_on == "significant":
        return [r["name"] for r in doc["params"] if r.get("significant")] + flipped + broken
    if fail_on == "material":
        return ([r["name"] for r in doc["params"] if r.get("material") and r.get("significant") is not False]
                + flipped + broken)
    raise DiffError(f"--fail-on takes significant or material, not {fail_on!r}")


# ----------------------------------------------------------------------------------------------
# text


def _num(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    return f"{v:.5g}"


def _p(p) -> str:
    if p is None:
        return "-"
    return "<1e-4" if p < 1e-4 else f"{p:.2g}"


def _ci(side) -> str:
    ci = side.get("ci95")
    if not ci:
        return "(no CI)"
    v = side["value"]
    if v and ci[0] > 0:
        lo, hi = (v - ci[0]) / abs(v), (ci[1] - v) / abs(v)
        return f"±{max(lo, hi):.2%}" if abs(lo - hi) < 0.1 * max(lo, hi, 1e-12) else f"-{lo:.2%}/+{hi:.2%}"
    return f"[{_num(ci[0])}, {_num(ci[1])}]"


def format_diff(doc: dict) -> str:
    a, b = doc["a"], doc["b"]
    out = [f"A: {a['path']}  ({a['device']}{', SIMULATED' if a['simulated'] else ''}, {a['created'] or 'no date'})",
           f"B: {b['path']}  ({b['device']}{', SIMULATED' if b['simulated'] else ''}, {b['created'] or 'no date'})",
           ""]
    if doc["fingerprint"]:
        out.append("fingerprint differences:")
        for r in doc["fingerprint"]:
            note = {"hard": "  (another device: the numbers are not comparable as one machine's)",
                    "soft": "", "condition": "  (a device setting)", "other": ""}[r["kind"]]
            out.append(f"  {r['section']}.{r['field']}: {r['a']!r} -> {r['b']!r}{note}")
    else:
        out.append("fingerprint: the same")
    out.append("")
    header = ("parameter", "unit", "A", "A CI", "B", "B CI", "B/A", "p", "")
    table = [header]
    for r in doc["params"]:
        if "unusable" in r:
            table.append((r["name"], r.get("unit") or "", "", "", "", "", "", "", f"not compared: {r['unusable']}"))
            continue
        if "ratio" not in r:
            table.append((r["name"], r.get("unit") or "", _num(r["a"]["value"]), "", _num(r["b"]["value"]), "", "", "",
                          "CHANGED" if r.get("changed") else ""))
            continue
        verdict = []
        if r["significant"]:
            verdict.append("significant")
        elif r["significant"] is None:
            verdict.append("untestable (no CIs)")
        if r["material"]:
            verdict.append("material")
        mark = " ".join(verdict)
        if r["significant"] and r["material"]:
            mark = "** " + mark
        table.append((r["name"], r.get("unit") or "", _num(r["a"]["value"]), _ci(r["a"]), _num(r["b"]["value"]),
                      _ci(r["b"]), f"{r['ratio']:.4f}" if r["ratio"] is not None else "-",
                      _p(r["p"]), mark))
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    for row in table:
        out.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    for side, key in (("A", "only_in_a"), ("B", "only_in_b")):
        if doc[key]:
            out.append(f"\nonly in {side}: " + ", ".join(doc[key]))
    s = doc["summary"]
    out.append(f"\n{s['compared']} compared: {s['significant']} significant (p < {doc['alpha']:g}), "
               f"{s['material']} material (beyond {doc['threshold']:.0%}), {s['significant_and_material']} both."
               + (f" {s['flipped']} yes/no parameter{'s' if s['flipped'] != 1 else ''} changed."
                  if s.get("flipped") else ""))
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------
# the command


def add_diff_parser(sub):
    from . import cli_args

    d = sub.add_parser("diff", help="two profiles side by side: what changed, significantly and materially")
    d.add_argument("a", metavar="A", help="the reference profile (a .json file)")
    d.add_argument("b", metavar="B", help="the profile compared with it")
    d.add_argument("--threshold", type=cli_args.non_negative_float, default=DEFAULT_THRESHOLD,
                   help="relative change that is material, as a fraction (default 0.05: B/A beyond 1.05 or 1/1.05)")
    d.add_argument("--alpha", type=cli_args.open_fraction, default=DEFAULT_ALPHA,
                   help="significance level (default 0.05)")
    d.add_argument("--fail-on", choices=["significant", "material"],
                   help="exit 1 if any parameter is significant (or significant and material)")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=run_diff)


def run_diff(args) -> int:
    import json
    import warnings

    with warnings.catch_warnings():
        # reading a file says what is wrong with it in the table; the loader's warnings would repeat it
        warnings.simplefilter("ignore")
        doc = diff_profiles(args.a, args.b, threshold=args.threshold, alpha=args.alpha)
    bad = failed(doc, args.fail_on)
    uncompared = [r["name"] for r in doc["params"] if "unusable" in r]
    if args.json:
        doc["fail_on"] = args.fail_on
        doc["failed"] = bad
        doc["not_compared"] = uncompared
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        print(format_diff(doc))
        if bad:
            names = [n + (" (not compared)" if n in uncompared else "") for n in bad]
            print(f"--fail-on {args.fail_on}: {', '.join(names)}")
    return 1 if bad else 0
