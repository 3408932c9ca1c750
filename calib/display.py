"""Parameters as tables for people: a pandas frame with numbers as numbers, and HTML for JupyterLab.

``calib.parameter_frame(profile)`` is the public entry (imported lazily, so that ``import calib``
still loads no pandas). The ``_repr_html_`` of :class:`~calib.profile.Profile`,
:class:`~calib.profile.Parameter` and the fit results come from here too, and so does the report's
parameter table (``calib.html_report``): one way of showing a parameter everywhere.

A parameter whose interval is a *bracket* rather than a confidence interval (the largest buffer
compiled without spills lies between the last size that did not spill and the first that did) is
shown as its bracket, never as a "± x%" it does not have.
"""

from __future__ import annotations

import html
import math

FRAME_COLUMNS = ["name", "value", "ci_low", "ci_high", "ci_pm_pct", "interval", "unit", "n", "r2", "flags",
                 "problem"]


def is_bracket(p) -> bool:
    """Whether the parameter's interval is a bracket (its method says so), not a 95% CI."""
    method = getattr(p, "method", None) if not isinstance(p, dict) else p.get("method")
    return "bracket" in (method or "").lower()


def _items(params):
    """(name, Parameter or the reason it cannot be used) for a Profile, a mapping of records or of
    Parameters, a FitResult (its failures too) or one Parameter."""
    from .profile import Parameter, Profile, ProfileError

    if isinstance(params, Profile):
        yield from params.parameters().items()
        return
    if isinstance(params, Parameter):
        yield params.name, params
        return
    failures = {}
    if hasattr(params, "records") and hasattr(params, "failures"):  # calib.fit.FitResult
        params, failures = params.records, params.failures
    for name, rec in params.items():
        if isinstance(rec, (Parameter, ProfileError)):
            yield name, rec
            continue
        try:
            yield name, Parameter.from_record(name, rec)
        except ProfileError as exc:
            yield name, exc
    for name, why in failures.items():
        yield name, ProfileError(f"not fitted: {why}")


def rows(params) -> list[dict]:
    """One dict per parameter, numbers as numbers (``None`` where there is none)."""
    from .profile import ProfileError

    out = []
    for name, p in _items(params):
        if isinstance(p, ProfileError):
            out.append({"name": name, "value": None, "ci_low": None, "ci_high": None, "ci_pm_pct": None,
                        "interval": None, "unit": None, "n": None, "r2": None, "flags": (), "problem": str(p)})
            continue
        value = p.value if not isinstance(p.value, bool) else float(p.value)
        lo, hi = p.ci95 if p.ci95 else (None, None)
        bracket = is_bracket(p)
        pm = None
        if lo is not None and not bracket and value:
            pm = 100 * (hi - lo) / 2 / abs(value)
        out.append({"name": name, "value": value, "ci_low": lo, "ci_high": hi, "ci_pm_pct": pm,
                    "interval": None if lo is None else ("bracket" if bracket else "95% CI"), "unit": p.unit,
                    "n": p.n, "r2": p.r2, "flags": tuple(p.flags), "problem": None})
    return out


def parameter_frame(params):
    """The parameters of a profile (or a mapping of records, or a fit result) as a pandas DataFrame.

    Columns: ``name``; ``value``, ``ci_low``, ``ci_high``, ``ci_pm_pct`` (the CI's half-width in
    percent of the value; empty for a bracket) and ``r2`` as floats; ``n`` as a nullable integer;
    ``interval`` ("95% CI", "bracket" or empty), ``unit``, ``flags`` (joined by "; ") and
    ``problem`` (why a record cannot be used, or was not fitted) as text. One row per parameter,
    sorted by name for a profile, in the fit's order for a fit result.
    """
    import pandas as pd

    data = rows(params)
    frame = pd.DataFrame(data, columns=FRAME_COLUMNS)
    for col in ("value", "ci_low", "ci_high", "ci_pm_pct", "r2"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("float64")
    frame["n"] = pd.array([r["n"] for r in data], dtype="Int64")
    frame["flags"] = ["; ".join(r["flags"]) for r in data]
    return frame


# -- text --------------------------------------------------------------------------------------

def num(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e6):
        return f"{int(v)}" if abs(v) < 1e6 else f"{v:.4e}"
    return f"{v:.6g}" if abs(v) < 1e6 else f"{v:.4e}"


def interval_text(row: dict) -> str:
    """The interval as people read it: ``[lo, hi]``, with "bracket" for a bracket."""
    if row["ci_low"] is None:
        return "(no CI)" if row["problem"] is None else ""
    text = f"[{num(row['ci_low'])}, {num(row['ci_high'])}]"
    return f"{text} bracket" if row["interval"] == "bracket" else text


def pm_text(row: dict) -> str:
    if row["interval"] == "bracket":
        return "bracket"
    return "" if row["ci_pm_pct"] is None else f"±{row['ci_pm_pct'] / 100:.2%}"


# -- HTML --------------------------------------------------------------------------------------

def esc(value) -> str:
    """Anything that comes from a file, HTML-escaped (quotes too: it may land in an attribute)."""
    return html.escape("" if value is None else str(value), quote=True)


STYLE = """<style>
table.calib-params{border-collapse:collapse;font-size:13px}
table.calib-params th,table.calib-params td{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left}
table.calib-params td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.calib-params tr.flagged td{background:#fff4e0}
table.calib-params tr.unusable td{background:#fde2e2}
.calib-sim{color:#b00020;font-weight:bold}
</style>"""


def table_html(params, *, link=None, row_id=None, caption: str | None = None, style: bool = True) -> str:
    """The parameters as an HTML table: value, interval, ±, unit, n, flags; flagged rows marked
    (class ``flagged`` and a ⚑ in the flags cell). ``link(name)``, where given, returns the
    ``href`` of the parameter's section (or None), and its name links there; ``row_id(name)`` the
    row's ``id``, for links to it."""
    out = [STYLE if style else "", '<table class="calib-params">']
    if caption:
        out.append(f"<caption>{esc(caption)}</caption>")
    out.append("<thead><tr><th>parameter</th><th>value</th><th>95% CI</th><th>±</th><th>unit</th><th>n</th>"
               "<th>flags</th></tr></thead><tbody>")
    for r in rows(params):
        cls = "unusable" if r["problem"] else ("flagged" if r["flags"] else "")
        name = esc(r["name"])
        href = link(r["name"]) if link else None
        if href:
            name = f'<a href="{esc(href)}">{name}</a>'
        flags = "; ".join(esc(f) for f in r["flags"])
        if r["flags"]:
            flags = "⚑ " + flags
        if r["problem"]:
            flags = f"UNUSABLE: {esc(r['problem'])}"
        rid = f' id="{esc(row_id(r["name"]))}"' if row_id else ""
        out.append(f'<tr{rid} class="{cls}" data-param="{esc(r["name"])}"><td><code>{name}</code></td>'
                   f'<td class="num">{esc(num(r["value"]))}</td><td class="num">{esc(interval_text(r))}</td>'
                   f'<td class="num">{esc(pm_text(r))}</td><td>{esc(r["unit"])}</td>'
                   f'<td class="num">{esc(num(r["n"]))}</td><td>{flags}</td></tr>')
    out.append("</tbody></table>")
    return "".join(out)


def profile_html(profile) -> str:
    d = profile.device or {}
    head = [f"<b>{esc(d.get('name') or 'profile')}</b>"]
    if profile.simulated:
        head.append('<span class="calib-sim">SIMULATED DEVICE</span>')
    if profile.path:
        head.append(f"<code>{esc(profile.path)}</code>")
    head.append(f"{len(profile)} parameters ({esc(profile.origin)})")
    if profile.created:
        head.append(f"created {esc(profile.created)}")
    lines = [STYLE, "<div>" + " · ".join(head) + "</div>"]
    if profile.unusable:
        lines.append(f"<div><b>UNUSABLE:</b> {esc(profile.unusable)}</div>")
    lines.append(table_html(profile, style=False))
    return "".join(lines)


def parameter_html(p) -> str:
    r = rows(p)[0]
    fields = [("value", f"{num(r['value'])} {r['unit'] or ''}"),
              ("bracket" if r["interval"] == "bracket" else "95% CI", interval_text(r)),
              ("±", pm_text(r)), ("n", num(r["n"])), ("R²", "" if p.r2 is None else f"{p.r2:.6g}"),
              ("method", p.method), ("flags", "; ".join(p.flags) or "none"), ("source", p.source),
              ("measured", p.measured)]
    fields += [(f"diagnostics: {k}", num(v) if isinstance(v, (int, float)) else v) for k, v in p.diagnostics.items()]
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in fields if v not in (None, ""))
    return f'{STYLE}<table class="calib-params"><caption><code>{esc(p.name)}</code></caption>{body}</table>'


def fit_result_html(result) -> str:
    head = f"<div><b>{esc(result.calibration)}</b>: {len(result.records)} fitted, {len(result.flagged)} flagged, " \
           f"{len(result.failures)} not fitted</div>"
    return STYLE + head + table_html(result, style=False)


def linear_fit_html(fit) -> str:
    fields = [("model", "t_us = intercept_us + x · slope_us"), ("method", fit.method), ("points", fit.n),
              ("intercept (us)", f"{fit.intercept_us:.6g} [{fit.intercept_ci95[0]:.6g}, {fit.intercept_ci95[1]:.6g}]"),
              ("slope (us per unit of x)", f"{fit.slope_us:.6g} [{fit.slope_ci95[0]:.6g}, {fit.slope_ci95[1]:.6g}]"),
              ("rate (per s)", "{:.6g} [{:.6g}, {:.6g}]".format(fit.rate_per_s, *fit.rate_ci95_per_s)),
              ("R²", f"{fit.r2:.6g}"),
              ("flags", "; ".join(fit.flags) or "none")]
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in fields)
    return f'{STYLE}<table class="calib-params"><caption>linear time fit</caption>{body}</table>'
