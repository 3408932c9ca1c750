"""Tables of parameters for people: the CLI prints them, notebooks display them."""

from __future__ import annotations

from .display import is_bracket
from .profile import Parameter, Profile, ProfileError


def _rows(params):
    if isinstance(params, Profile):
        items = params.parameters().items()
    else:
        items = []
        for name, rec in params.items():
            try:
                items.append((name, Parameter.from_record(name, rec)))
            except ProfileError as exc:
                items.append((name, exc))
    for name, p in sorted(items):
        if isinstance(p, ProfileError):
            yield {"name": name, "value": None, "ci95": "", "pm": "", "unit": "", "n": "", "flags": f"UNUSABLE: {p}"}
            continue
        if p.ci95 and is_bracket(p):  # a bracket is not a CI: no "±" it does not have
            ci, pm = f"[{_num(p.ci95[0])}, {_num(p.ci95[1])}]", "bracket"
        elif p.ci95:
            half = (p.ci95[1] - p.ci95[0]) / 2
            ci = f"[{_num(p.ci95[0])}, {_num(p.ci95[1])}]"
            pm = f"±{half / abs(p.value):.2%}" if p.value else ""
        else:
            ci, pm = "(no CI)", ""
        yield {"name": name, "value": _num(p.value), "ci95": ci, "pm": pm, "unit": p.unit or "",
               "n": "" if p.n is None else str(p.n), "flags": "; ".join(p.flags)}


def _num(v: float) -> str:
    return f"{v:.6g}" if abs(v) < 1e6 else f"{v:.4e}"


def parameter_frame(params):
    """Numbers as numbers: see calib.display.parameter_frame (public as calib.parameter_frame)."""
    from .display import parameter_frame

    return parameter_frame(params)


def format_table(params, *, simulated: bool = False) -> str:
    rows = list(_rows(params))
    if not rows:
        return "(no parameters)"
    cols = ["name", "value", "ci95", "pm", "unit", "n", "flags"]
    heads = {"name": "parameter", "value": "value", "ci95": "95% CI", "pm": "±", "unit": "unit", "n": "n",
             "flags": "flags"}
    widths = {c: max(len(heads[c]), *(len(str(r[c] or "")) for r in rows)) for c in cols[:-1]}
    lines = ["  ".join(heads[c].ljust(widths[c]) for c in cols[:-1]) + "  flags"]
    for r in rows:
        lines.append("  ".join(str(r[c] or "").ljust(widths[c]) for c in cols[:-1]) + "  " + r["flags"])
    if simulated:
        lines.insert(0, "SIMULATED DEVICE — not a measurement of real hardware")
    return "\n".join(lines)
