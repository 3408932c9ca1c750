"""``calib report RUN_DIR``: one self-contained HTML file for reviewing a run.

What a reviewer reads, in order: the parameter table (value, interval, ±, unit, n, flags; flagged
rows marked), each row linking to its calibration's section; one section per calibration of the
registry with what it measures, how a heuristic reads it (no code), its parameters and its fit and
residual figures (the PNGs the notebooks saved, inlined as base64), each figure linking back to
the table; then the device and software fingerprint, the clocks and throttle reasons the
measurements recorded, and the timing protocol. A run on the simulated device says so at the top
and on every figure.

Everything that comes from a file (names, units, flags, fingerprints, protocols) is HTML-escaped:
a hostile parameter name shows as text. The file loads nothing from elsewhere: no scripts, no
stylesheets, no fonts, no images outside it.
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path

from . import runfolder
from .display import STYLE, esc, table_html

PAGE_STYLE = """<style>
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em auto;max-width:1200px;
     padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.6em;margin-bottom:.2em} h2{border-bottom:2px solid #ccc;padding-bottom:.2em;margin-top:2em}
h3{margin-bottom:.3em}
.banner{background:#b00020;color:#fff;font-weight:bold;font-size:1.3em;padding:.6em 1em;border-radius:4px;
        margin:.5em 0 1em}
.meta{color:#555} .meta code{color:#333}
figure{margin:1em 0;border:1px solid #ddd;padding:.5em;border-radius:4px;background:#fff}
figure img{max-width:100%;height:auto;display:block}
figcaption{font-size:.85em;color:#555;margin-top:.3em}
nav.toc a{margin-right:1em}
table.kv{border-collapse:collapse;font-size:13px} table.kv th,table.kv td{padding:2px 8px;
         border-bottom:1px solid #eee;text-align:left;vertical-align:top}
.failed{color:#b00020}
.reading{background:#f6f8fa;padding:.5em 1em;border-radius:4px}
</style>"""


class ReportError(runfolder.RunFolderError):
    """A report that cannot be written (not a run folder, an unreadable fragment, an output path
    that cannot be written)."""


def slug(name: str) -> str:
    """An anchor for any name: letters, digits, '-', '_' and '.', anything else '_'."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(name))


def _markdown(text: str) -> str:
    """The registry's prose (short markdown: paragraphs and `code`) as HTML, escaped first."""
    out = []
    for para in re.split(r"\n\s*\n", (text or "").strip()):
        if para:
            html = re.sub(r"`([^`]+)`", r"<code>\1</code>", esc(para).replace("\n", " "))
            out.append(f"<p>{html}</p>")
    return "".join(out)


def _kv_table(pairs) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(_plain(v))}</td></tr>" for k, v in pairs)
    return f'<table class="kv">{rows}</table>'


def _plain(v) -> str:
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    return "" if v is None else str(v)


def _figure_params(stem: str, calibration: str, params: list[str]) -> list[str]:
    """The parameters a figure shows: a fit line's or residual plot's own (named by its slug), or
    every parameter of the calibration for its overview figures."""
    for prefix in ("line-", "residuals-"):
        if stem.startswith(prefix):
            own = [p for p in params if p.replace(".", "_") == stem[len(prefix):]]
            if own:
                return own
    return list(params)


def _database_to_read(named: str, local: Path) -> str | None:
    """The URL to read a fragment's session from, or None. The run folder's own SQLite file (also
    where the folder was moved or copied), or the database the user names (``CALIB_DB_URL``, which
    the fragment records with its password hidden); never another: the report of a run folder from
    elsewhere had connected to whatever host its fragments named, or opened any file they pointed at."""
    if named.startswith("sqlite") and local.exists():
        return f"sqlite:///{local}"
    configured = os.environ.get("CALIB_DB_URL")
    if not configured:
        return None
    try:
        from sqlalchemy.engine import make_url

        shown = make_url(configured).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable CALIB_DB_URL names nothing here
        return None
    return configured if shown == named else None


def _conditions(run: runfolder.RunFolder) -> tuple[dict, str | None]:
    """Per calibration: results, throttled results, clock ranges, throttle reasons and the timing
    protocols the results database recorded for the run's sessions."""
    sessions = {}
    for cal, frag in run.fragments.items():
        s = frag.get("session") or {}
        if s.get("id") is not None and s.get("db"):
            sessions.setdefault(s["db"], {})[int(s["id"])] = cal
    local = run.path / runfolder.DATABASE
    if not sessions:
        return {}, "the fragments name no measurement session"
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from .store import Store
    from .store.tables import ConfigRow, ResultRow

    out: dict = {}
    problems = []
    for named, by_session in sessions.items():
        url = _database_to_read(named, local)
        if url is None:
            problems.append(f"{named}: not read (a database neither in the run folder nor named by CALIB_DB_URL; "
                            "set CALIB_DB_URL to it to include what it recorded)")
            continue
        try:
            store = Store(url, readonly=True)
            q = (select(ResultRow.session_id, ConfigRow.experiment, ResultRow.throttled, ResultRow.protocol,
                        ResultRow.clocks)
                 .join(ConfigRow, ResultRow.config_id == ConfigRow.id)
                 .where(ResultRow.session_id.in_(list(by_session)), ResultRow.role == "measurement"))
            with Session(store.engine) as s:
                rows = s.execute(q).all()
        except Exception as exc:  # noqa: BLE001 - the report still shows everything else
            problems.append(f"{named}: {type(exc).__name__}: {str(exc).replace(url, named)}")
            continue
        for sid, experiment, throttled, protocol, clocks in rows:
            # a run's notebooks share one session (its label): the config's experiment is the calibration
            cal = experiment or by_session.get(sid)
            c = out.setdefault(cal, {"results": 0, "throttled": 0, "reasons": set(), "clocks": {}, "protocols": {}})
            c["results"] += 1
            c["throttled"] += bool(throttled)
            clocks = clocks if isinstance(clocks, dict) else {}
            c["reasons"].update(x for x in clocks.get("throttle_reasons") or [] if isinstance(x, str))
            for key in ("sm_mhz", "mem_mhz", "temperature_c", "power_w"):
                lo, hi = clocks.get(f"{key}_min"), clocks.get(f"{key}_max")
                if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
                    was = c["clocks"].get(key)
                    c["clocks"][key] = (min(was[0], lo), max(was[1], hi)) if was else (lo, hi)
            proto = {k: v for k, v in (protocol or {}).items()
                     if k not in ("perf_config", "tuned_on", "attempt", "cooldown_s", "set_aside_because", "role")}
            key = json.dumps(proto, sort_keys=True, default=str)
            c["protocols"][key] = c["protocols"].get(key, 0) + 1
    return out, "; ".join(problems) or None


def _conditions_html(conditions: dict, problem: str | None, order: list[str]) -> str:
    parts = []
    if problem:
        parts.append(f'<p class="failed">Results database not read: {esc(problem)}</p>')
    if not conditions:
        parts.append("<p>No measurement results recorded for this run's sessions.</p>")
        return "".join(parts)
    head = ("<tr><th>calibration</th><th>results</th><th>throttled</th><th>throttle reasons seen</th>"
            "<th>SM clock (MHz)</th><th>memory clock (MHz)</th><th>temperature (°C)</th><th>power (W)</th></tr>")
    body = []
    for cal in [c for c in order if c in conditions] + [c for c in conditions if c not in order]:
        c = conditions[cal]

        def rng(key, c=c):
            r = c["clocks"].get(key)
            return "" if r is None else (f"{r[0]:g}" if r[0] == r[1] else f"{r[0]:g} to {r[1]:g}")

        body.append(f"<tr><td><a href=\"#cal-{esc(slug(cal))}\">{esc(cal)}</a></td><td>{c['results']}</td>"
                    f"<td>{c['throttled']}</td><td>{esc(', '.join(sorted(c['reasons'])) or 'none')}</td>"
                    f"<td>{esc(rng('sm_mhz'))}</td><td>{esc(rng('mem_mhz'))}</td><td>{esc(rng('temperature_c'))}</td>"
                    f"<td>{esc(rng('power_w'))}</td></tr>")
    parts.append(f'<table class="kv" id="clocks">{head}{"".join(body)}</table>')
    if not any(c["clocks"] for c in conditions.values()):
        parts.append("<p>No clock readings were recorded (the simulated device has no clocks; on a GPU, NVML "
                     "was not available).</p>")
    return "".join(parts)


def _protocol_html(conditions: dict, order: list[str]) -> str:
    if not conditions:
        return "<p>No timing protocol recorded.</p>"
    rows = []
    for cal in [c for c in order if c in conditions] + [c for c in conditions if c not in order]:
        for text, count in sorted(conditions[cal]["protocols"].items(), key=lambda kv: -kv[1]):
            try:
                proto = json.loads(text)
            except ValueError:
                proto = {"protocol": text}
            rule = proto.pop("rule", None)
            timer = proto.pop("timer", "")
            rows.append(f"<tr><td>{esc(cal)}</td><td>{count}</td><td>{esc(timer)}</td>"
                        f"<td><code>{esc(_plain(rule))}</code></td><td><code>{esc(_plain(proto))}</code></td></tr>")
    return ('<table class="kv" id="protocol"><tr><th>calibration</th><th>results</th><th>timer</th>'
            "<th>stopping rule</th><th>other settings</th></tr>" + "".join(rows) + "</table>")


def _timings_html(index: dict) -> str:
    """The run's phase table (calib.phases): a row per notebook, a column per phase, seconds;
    then the critical path. A run from before phases were recorded has wall times only."""
    from .phases import describe_critical_path, table_rows

    rows = table_rows(index.get("notebooks"))
    parts = ['<h2 id="timings">Where the time went</h2>']
    if len(rows) == 1:
        return parts[0] + "<p>This run's index records no notebooks.</p>"
    parts.append("<p>Seconds per notebook, from <code>calib run</code> launching its process: <b>start</b> (process, "
                 "kernel, parameters cell), <b>setup</b> (imports, backend, results store), <b>compile</b>, "
                 "<b>wait</b> (its turn, the GPU lock), <b>measure</b>, <b>fit</b>, <b>plot</b>, <b>write</b> "
                 "(the fragment), and <b>other</b>: the wall time less the phases (cells between them, kernel "
                 "shutdown, the executed notebook written). A notebook without phases was run before they were "
                 "recorded, or failed.</p>")
    head = "".join(f"<th>{esc(c)}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows[1:])
    parts.append(f'<table class="kv" id="phase-table"><tr>{head}</tr>{body}</table>')
    text = describe_critical_path(index.get("critical_path"))
    if text:
        parts.append(f'<p class="meta" id="critical-path">{esc(text)}</p>')
    return "".join(parts)


def _figure_data(path: Path) -> tuple[str, str | None]:
    """A figure's PNG as base64, or why it cannot be inlined. Read like a profile (a regular file
    of bounded size, opened without blocking): a folder, a FIFO or a link loop named ``*.png`` in a
    run folder hung ``calib report`` or ended it in a traceback; it costs only its own figure."""
    from .profile import ProfileError, _read_bytes

    try:
        return base64.b64encode(_read_bytes(path, "figure")).decode("ascii"), None
    except ProfileError as exc:
        return "", str(exc)


def _section(run: runfolder.RunFolder, cal: str, profile, simulated: bool) -> tuple[str, list[str]]:
    """One calibration's section, and the figures' ids."""
    from . import calibrations

    try:
        module = calibrations.get(cal)
        title, intro, reading = module.TITLE, module.INTRO, module.READING
        declared = [p.name for p in module.PARAMETERS]
    except calibrations.UnknownCalibration:
        title, intro, reading, declared = cal, "", "", []
    frag = run.fragments.get(cal) or {}
    params = list(frag.get("params") or {}) or [n for n in declared if n in profile.params]
    failures = dict(frag.get("failures") or {})
    notebook = next((nb for nb in run.index.get("notebooks", []) if isinstance(nb, dict)
                     and nb.get("calibration") == cal), {})
    parts = [f'<section id="cal-{esc(slug(cal))}"><h2>{esc(title)} <small><code>{esc(cal)}</code></small></h2>']
    meta = []
    if notebook.get("wall_s") is not None:
        meta.append(f"notebook wall time {esc(notebook['wall_s'])} s")
    if notebook.get("notebook"):
        meta.append(f"executed notebook <code>{esc(notebook['notebook'])}</code>")
    if notebook.get("status") == "failed":
        meta.append(f'<span class="failed">FAILED: {esc(notebook.get("error"))}</span>')
    if meta:
        parts.append(f'<p class="meta">{" · ".join(meta)}</p>')
    if intro:
        parts.append(f"<h3>What it measures</h3>{_markdown(intro)}")
    if reading:
        parts.append(f'<h3>Reading</h3><div class="reading">{_markdown(reading)}</div>')
    records = {n: profile.params[n] for n in params if n in profile.params}
    if records or failures:
        from .fit import FitResult

        parts.append("<h3>Parameters</h3>")
        parts.append(table_html(FitResult(cal, records=records, failures=failures), style=False,
                                link=lambda n: f"#row-{slug(n)}", row_id=lambda n: f"param-{slug(n)}"))
    figures = run.figures(cal, params)
    ids = []
    if figures:
        parts.append("<h3>Fits and residuals</h3>")
    for path in figures:
        shows = _figure_params(path.stem, cal, params)
        fig_id = f"fig-{slug(cal)}-{slug(path.stem)}"
        ids.append(fig_id)
        data, why_not = _figure_data(path)
        if why_not:
            parts.append(f'<p class="failed" id="{esc(fig_id)}">Figure <code>{esc(path.name)}</code> not included: '
                         f"{esc(why_not)}</p>")
            continue
        back = (f'<a href="#row-{esc(slug(shows[0]))}">back to {esc(shows[0])} in the table</a>' if len(shows) == 1
                else '<a href="#parameters">back to the parameter table</a>')
        sim = " (SIMULATED DEVICE)" if simulated else ""
        parts.append(f'<figure id="{esc(fig_id)}" data-params="{esc(" ".join(shows))}">'
                     f'<img alt="{esc(path.stem)}{sim}" src="data:image/png;base64,{data}">'
                     f"<figcaption><code>{esc(path.name)}</code>{esc(sim)} · {back}</figcaption></figure>")
    if not figures:
        parts.append("<p>No figures were saved for this calibration.</p>")
    parts.append("</section>")
    return "".join(parts), ids


def build_report(run_dir) -> str:
    """The report's HTML text for a run folder (see the module docstring)."""
    run = runfolder.RunFolder(run_dir)
    profile = run.profile()
    simulated = run.simulated or profile.simulated
    cals = run.calibrations
    cal_of = {}
    for cal in cals:
        for name in (run.fragments.get(cal) or {}).get("params") or {}:
            cal_of.setdefault(name, cal)
    for name in profile.params:
        if name not in cal_of:
            source = (profile.params[name] or {}).get("source") if isinstance(profile.params[name], dict) else None
            m = re.search(r"notebooks/([A-Za-z0-9_]+)\.ipynb", source or "")
            cal_of[name] = m.group(1) if m else None
    device = profile.device or {}
    index = run.index
    title = f"calib run report: {device.get('name') or 'unknown device'}"
    parts = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
             f"<title>{esc(title)}{' (SIMULATED)' if simulated else ''}</title>", PAGE_STYLE, STYLE, "</head><body>"]
    parts.append(f"<h1>{esc(title)}</h1>")
    if simulated:
        from .calibration import SIMULATED_BANNER

        parts.append(f'<div class="banner" id="simulated">{esc(SIMULATED_BANNER)}</div>')
    meta = [f"run folder <code>{esc(run.path)}</code>"]
    for key, label in (("finished", "finished"), ("profile", "merged into")):
        if index.get(key):
            meta.append(f"{label} <code>{esc(index[key])}</code>")
    if isinstance(index.get("wall_s"), (int, float)):
        meta.append(f"wall time {index['wall_s']:.1f} s")
    failed = index.get("failed") or []
    if failed:
        meta.append(f'<span class="failed">{len(failed)} notebook(s) failed</span>')
    parts.append(f'<p class="meta">{" · ".join(meta)}</p>')
    toc = ['<a href="#parameters">parameters</a>', '<a href="#timings">where the time went</a>']
    toc += [f'<a href="#cal-{esc(slug(c))}">{esc(c)}</a>' for c in cals]
    toc += ['<a href="#fingerprint">fingerprint</a>', '<a href="#conditions">clocks and throttling</a>',
            '<a href="#protocol-section">timing protocol</a>']
    parts.append(f'<nav class="toc">{" ".join(toc)}</nav>')

    parts.append(f'<h2 id="parameters">Parameters ({len(profile.params)})</h2>')
    parts.append("<p>Value with its 95% confidence interval from the fit (a <b>bracket</b> where the parameter is "
                 "bracketed by a grid, not estimated); flagged fits are marked ⚑ and shaded. Each name links to "
                 "its calibration's section.</p>")
    parts.append(table_html(profile, style=False,
                            link=lambda n: f"#param-{slug(n)}" if cal_of.get(n) in cals else None,
                            row_id=lambda n: f"row-{slug(n)}"))
    for nb, why in failed:
        parts.append(f'<p class="failed">FAILED {esc(nb)}: {esc(why)}</p>')
    parts.append(_timings_html(index))

    for cal in cals:
        html, _ids = _section(run, cal, profile, simulated)
        parts.append(html)

    parts.append('<h2 id="fingerprint">Fingerprint</h2>')
    parts.append("<h3>Device</h3>" + _kv_table(device.items()))
    parts.append("<h3>Software</h3>" + _kv_table((profile.software or {}).items()))
    conditions, problem = _conditions(run)
    parts.append('<h2 id="conditions">Clocks and throttle reasons seen</h2>')
    parts.append(_conditions_html(conditions, problem, cals))
    parts.append('<h2 id="protocol-section">Timing protocol</h2>')
    from .timing import OUTLIER_MADS

    parts.append("<p>Each sweep point is timed until the 95% CI of its median is within the stopping rule's "
                 "precision, or its time budget is spent; its estimate is the mean of the samples within "
                 f"{OUTLIER_MADS:g} robust SDs of the median. The settings the results recorded:</p>")
    parts.append(_protocol_html(conditions, cals))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(run_dir, output=None) -> Path:
    """Write the report (default: ``<run folder>/report.html``) atomically; return its path.

    Through ``calib.atomic``, like every file calib writes beside a user's own: a pipe or FIFO
    (``-o /dev/stdout``) is written as a stream, and a link is followed to the file it names. A
    temporary file renamed over ``/dev/stdout`` had replaced the link itself (as root) and printed
    nothing."""
    from . import atomic

    run_dir = Path(run_dir)
    target = Path(output) if output else run_dir / runfolder.REPORT
    if target.is_dir():  # refused before the report is built (it left a temporary file beside the folder)
        raise ReportError(f"cannot write the report to {target}: it is a folder; give a file, e.g. "
                          f"{target / runfolder.REPORT}")
    text = build_report(run_dir)
    atomic.replace(target, text.encode("utf-8"), ReportError)
    return target
