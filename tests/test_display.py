"""What a person sees of a profile, a parameter and a fit: numbers as numbers in a frame, HTML
tables in JupyterLab, a compact repr in a terminal, and a bracket shown as a bracket."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd

import calib
from calib.fit import FitResult, fit_linear_time, make_record
from calib.report import format_table

BRACKET = "normalization.max_persistent_elements_per_thread"
HOSTILE = 'x.<script>alert("pwned")</script>'


def _profile():
    params = {
        "memory.dram.read_bandwidth_gbps": {"value": 4705.2, "ci95": [4702.0, 4708.4], "unit": "GB/s", "n": 15,
                                            "method": "WLS", "r2": 0.99999, "flags": []},
        "launch.overhead_us": {"value": 6.1, "ci95": [5.0, 7.2], "unit": "us", "n": 8, "flags": ["wide CI: ±18%"]},
        BRACKET: {"value": 192.0, "ci95": [192.0, 223.0], "unit": "count", "n": 14,
                  "method": "largest N compiled without spills; not a confidence interval but the bracket the grid "
                            "leaves"},
        HOSTILE: {"value": 1.0, "unit": "<b>u</b>", "flags": ["<img src=x onerror=alert(1)>"]},
    }
    return calib.Profile(params, device={"name": "NVIDIA H200", "simulated": True})


def test_parameter_frame_has_numeric_columns_and_is_public():
    frame = calib.parameter_frame(_profile())
    assert frame["value"].dtype == np.float64 and frame["ci_low"].dtype == np.float64
    assert frame["ci_high"].dtype == np.float64 and str(frame["n"].dtype) == "Int64"
    row = frame.set_index("name").loc["memory.dram.read_bandwidth_gbps"]
    assert row["value"] == 4705.2 and row["n"] == 15 and row["interval"] == "95% CI"
    assert abs(row["ci_pm_pct"] - 100 * 3.2 / 4705.2) < 1e-9
    bracket = frame.set_index("name").loc[BRACKET]
    assert bracket["interval"] == "bracket" and pd.isna(bracket["ci_pm_pct"])
    assert (bracket["ci_low"], bracket["ci_high"]) == (192.0, 223.0)
    assert frame["value"].sum() > 4705  # arithmetic works: these are numbers, not text


def test_a_bracket_is_shown_as_a_bracket_never_as_plus_minus():
    profile = _profile()
    text = format_table(profile)
    line = next(x for x in text.splitlines() if x.startswith(BRACKET))
    assert "bracket" in line and "±" not in line and "[192, 223]" in line
    html = profile._repr_html_()
    row = html[html.index(f'data-param="{BRACKET}"'):]
    row = row[: row.index("</tr>")]
    assert "bracket" in row and "±" not in row and "8.07" not in row


def test_profile_and_parameter_display_as_html_tables_with_names_escaped():
    profile = _profile()
    html = profile._repr_html_()
    assert "<table" in html and "SIMULATED" in html and "4705.2" in html
    assert "<script>" not in html and "<img" not in html and "&lt;script&gt;" in html
    assert 'class="flagged"' in html  # launch.overhead_us
    p = profile.record("memory.dram.read_bandwidth_gbps")
    assert "<table" in p._repr_html_() and "4705.2" in p._repr_html_() and "WLS" in p._repr_html_()
    assert "<script>" not in calib.Parameter(HOSTILE, 1.0)._repr_html_()
    assert repr(p) == ("Parameter(name='memory.dram.read_bandwidth_gbps', value=4705.2, ci95=(4702.0, 4708.4), "
                       "unit='GB/s', n=15)")
    assert "WLS" not in repr(p)  # compact: the method and diagnostics are in the HTML


def test_fit_results_have_a_compact_repr_and_an_html_table():
    x = np.linspace(1e8, 1e9, 8)
    fit = fit_linear_time(x, 5 + x / 4e9 * 1e6 * (1 + 1e-4 * np.sin(x)), n_samples=np.full(8, 20))
    assert repr(fit).startswith("<LinearTimeFit n=8: intercept") and "array" not in repr(fit)
    assert "<table" in fit._repr_html_()
    result = FitResult("memory_bandwidth", records={"memory.dram.read_bandwidth_gbps": make_record(
        4000.0, (3990.0, 4010.0), "GB/s", n=8, method="WLS")}, failures={"memory.dram.fixed_cost_us": "no points"})
    assert repr(result) == "<FitResult memory_bandwidth: 1 fitted, 0 flagged, 1 not fitted>"
    html = result._repr_html_()
    assert "4000" in html and "not fitted: no points" in html
    frame = calib.parameter_frame(result)
    assert list(frame["name"]) == ["memory.dram.read_bandwidth_gbps", "memory.dram.fixed_cost_us"]
    assert frame["value"].dtype == np.float64


def test_import_calib_still_loads_no_pandas_yet_parameter_frame_is_there():
    code = ("import sys, json, calib\nbefore = 'pandas' in sys.modules\nf = calib.parameter_frame\n"
            "print(json.dumps([before, 'pandas' in sys.modules, callable(f)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == [False, False, True]  # pandas only once a frame is made


def test_plot_helpers_close_their_figures_and_save_figure_returns_nothing(tmp_path):
    """A figure left open is shown twice in Jupyter (the returned one, and pyplot's own at the end
    of the cell); a cell ending in save_figure showed a PosixPath."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from calib.calibration import Calibration

    plt.close("all")
    x = np.linspace(0, 1e9, 8)  # a point at zero work: the residual panel goes symlog
    fit = fit_linear_time(x, 5 + x / 4e9 * 1e6 * (1 + 1e-4 * np.cos(x)), n_samples=np.full(8, 20))
    title = "matmul.splitk.elements_reduced_per_second (SIMULATED DEVICE) " * 2
    line = fit.plot_line(title=title, record={"value": 4.0, "ci95": [3.9, 4.1], "unit": "GB/s"})
    resid = fit.plot_residuals(title=title)
    assert plt.get_fignums() == []  # closed, yet still drawable
    assert "\n" in line.axes[0].get_title()  # wrapped to the figure's width, not clipped
    cal = Calibration("shared_memory", backend="sim", output_dir=tmp_path)
    assert cal.save_figure(resid, "residuals-x") is None
    assert (tmp_path / "residuals-x.png").stat().st_size > 1000
    assert any(t.get_text() == "SIMULATED DEVICE" for t in resid.texts)


def test_a_linear_fit_html_table_gives_the_rate_with_its_ci():
    """The rate is what a fit reports; its table had given it without the CI it has."""
    x = np.linspace(1e8, 1e9, 8)
    fit = fit_linear_time(x, (5 + x / 4e6) * (1 + 0.01 * np.random.default_rng(0).standard_normal(8)))
    lo, hi = fit.rate_ci95_per_s
    assert f"<th>rate (per s)</th><td>{fit.rate_per_s:.6g} [{lo:.6g}, {hi:.6g}]</td>" in fit._repr_html_()
