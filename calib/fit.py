"""Fits of timing models, with confidence intervals that come from the fit and flags that say
when the fit should not be trusted.

The basic model of every throughput parameter is ``t = t0 + work / rate``: a fixed cost plus the
work (bytes, elements, flops) over the rate. It is linear in ``1/rate``, so it is fitted by least
squares and the rate's interval is the slope's interval inverted (exact for a monotone map); where
the slope's interval reaches zero the inversion is meaningless and the delta method stands in,
with a flag.

Timing noise is roughly proportional to the time (a 1% jitter on a 1 ms kernel is ten times one on
100 us), and a point's median from n samples has variance ~ t^2 / n. The fit is therefore weighted
by ``n / t_fitted^2`` (fitted, not observed, times, so that a noisy point does not pick its own
weight), with classical standard errors from the residual scale, and Huber's M-estimator as the
outlier-robust option. Heteroscedasticity-robust errors (``cov_type="HC3"``) are available, but
with the 6 to 16 points of a sweep HC3 is conservative (97–99.5% coverage for a nominal 95% on
the simulated device) and HC2 under-covers intercepts; the classical errors came out at 92–98%.
A variance model gone wrong shows instead as a lack-of-fit flag against the points' own noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ._lazy import lazy

np = lazy("numpy")

# A poor fit is flagged, never hidden. These thresholds decide what "poor" means.
MIN_R2 = 0.99
MAX_REL_CI_HALFWIDTH = 0.05
PATTERN_P = 0.001
# Residuals this many times larger than the points' own measurement error mean the model misses
# something (a cache knee, a clock change), however good R² looks.
LACK_OF_FIT_RATIO = 3.0
# With a precise GPU (0.1% per point) tiny, harmless departures from a line are significant; a
# pattern is flagged only where it is also material: the line misses by more than this fraction.
MATERIAL_REL = 0.005
OUTLIER_Z = 4.0
# Residuals below this share of the time are floating-point rounding, not a departure from the line.
ROUNDING_REL = 1e-9
MIN_POINTS = 5
# Interference slows kernels, never speeds them up. A slowdown smaller than the points' outlier cut
# (calib.timing: 3.5 robust SDs) stays in the point's mean and biases its time up, and the fit cannot
# see it: it scales every point alike, so the line fits as well, and its CI is too narrow. On the
# simulated device with 10% of the samples slowed by 1 + Exp(1) (rel_sd 0.05-0.15) or 1 + 0.1 Exp(1)
# (rel_sd 0.02), rates came out 0.2-1.2% low and their CIs covered 32-93% with the notebooks' 400
# samples a point, none flagged (2026-12-07). What shows it is the inliers' right skew: where the kept
# interference spreads evenly up to the cut at c = 3.5 SDs, it biases the mean by 2 / (c² - 6) x skew
# x SD (its third moment against its first, less the shift of the centre). On the simulated device
# this came out at 1.0-1.3x the actual bias wherever the bias mattered; more (up to about 5x) where
# the 0.5% floor of the cut keeps slowdowns of many SDs (calib.timing.MIN_ROBUST_SD_REL).
INTERFERENCE_BIAS_PER_SKEW = 2.0 / (3.5**2 - 6.0)
# The CI is widened by that bias, on the side the bias hides, where the points' pooled skew is
# significant at 5% one-sided, so that symmetric noise seldom widens one (about 5% of the fits, by
# its own small skew).
INTERFERENCE_WIDEN_Z = 1.6448536269514722
# ... and flagged where the skew is significant at PATTERN_P and the bias is material: a quarter of
# the parameter's CI half-width (where coverage had fallen to about 92%) and 0.1% of the time.
INTERFERENCE_FLAG_Z = 3.090232306167813
INTERFERENCE_MATERIAL_OF_CI = 0.25
INTERFERENCE_MATERIAL_REL = 0.001


@dataclass
class LinearTimeFit:
    """``t_us = intercept_us + x / rate``, fitted over sweep points."""

    x: np.ndarray
    t_us: np.ndarray
    weights: np.ndarray
    method: str
    intercept_us: float
    intercept_ci95: tuple[float, float]
    slope_us: float  # microseconds per unit of x
    slope_ci95: tuple[float, float]
    slope_se: float
    dof: float
    r2: float
    fitted_us: np.ndarray
    std_resid: np.ndarray
    flags: list[str] = field(default_factory=list)
    diagnostics: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.x.size)

    def __repr__(self):  # the arrays stay out of a terminal; _repr_html_ is the table in JupyterLab
        flags = f", {len(self.flags)} flag(s)" if self.flags else ""
        return (f"<LinearTimeFit n={self.n}: intercept {self.intercept_us:.5g} us, slope {self.slope_us:.5g} us per "
                f"unit, R²={self.r2:.5f}{flags}>")

    def _repr_html_(self):
        from .display import linear_fit_html

        return linear_fit_html(self)

    @property
    def rate_per_s(self) -> float:
        return 1e6 / self.slope_us if self.slope_us > 0 else float("nan")

    @property
    def rate_ci95_per_s(self) -> tuple[float, float]:
        lo, hi = self.slope_ci95
        if lo > 0:
            return 1e6 / hi, 1e6 / lo
        # Delta method: se(1/b) = se(b) / b^2. Only reached for a fit already flagged.
        from scipy import stats

        rate = self.rate_per_s
        se = 1e6 * self.slope_se / self.slope_us**2 if self.slope_us > 0 else float("inf")
        q = stats.t.ppf(0.975, self.dof)
        return rate - q * se, rate + q * se

    def rate_record(self, scale: float, unit: str, *, source: str | None = None, extra_flags=()) -> dict:
        """A profile record for the rate, in units of ``scale`` per second (1e9 for GB/s)."""
        lo, hi = self.rate_ci95_per_s
        value = self.rate_per_s / scale
        flags = list(self.flags) + list(extra_flags)
        rel = (hi - lo) / 2 / self.rate_per_s if self.rate_per_s > 0 else float("inf")
        if rel > MAX_REL_CI_HALFWIDTH:
            flags.append(f"wide CI: ±{rel:.1%}")
        flags += _interference_flags(self, rel, -self.diagnostics.get("interference_slope_bias_us", 0.0)
                                     / self.slope_us if self.slope_us else 0.0)
        return _record(value, (lo / scale, hi / scale), unit, self, flags, source,
                       ci_method="inverted slope CI" if self.slope_ci95[0] > 0 else "delta method")

    def slope_record(self, unit: str = "us", *, source: str | None = None) -> dict:
        """A profile record for the slope itself: a cost per unit of x (per launch, per node)."""
        flags = list(self.flags)
        rel = (self.slope_ci95[1] - self.slope_ci95[0]) / 2 / abs(self.slope_us) if self.slope_us else float("inf")
        if rel > MAX_REL_CI_HALFWIDTH:
            flags.append(f"wide CI: ±{rel:.1%}")
        flags += _interference_flags(self, rel, self.diagnostics.get("interference_slope_bias_us", 0.0)
                                     / abs(self.slope_us) if self.slope_us else 0.0)
        return _record(self.slope_us, self.slope_ci95, unit, self, flags, source, ci_method="slope CI")

    def intercept_record(self, unit: str = "us", *, source: str | None = None) -> dict:
        flags = list(self.flags)
        if self.intercept_ci95[1] < 0:
            flags.append("negative fixed cost: the model misses something at small sizes")
        lo, hi = self.intercept_ci95
        rel = (hi - lo) / 2 / abs(self.intercept_us) if self.intercept_us else float("inf")
        flags += _interference_flags(self, rel, self.diagnostics.get("interference_intercept_bias_us", 0.0)
                                     / abs(self.intercept_us) if self.intercept_us else 0.0)
        return _record(self.intercept_us, self.intercept_ci95, unit, self, flags, source,
                       ci_method="intercept CI")

    def plot_line(self, *, title: str = "", x_label: str = "x", x_scale: float = 1.0, ax=None,
                  record: dict | None = None):
        """The measured times against the work, with the fitted line: the model at a glance. With
        the parameter's ``record``, the legend states the estimate and its 95% CI, so the figure
        says what was concluded from it."""
        import matplotlib.pyplot as plt

        from .plotting import detach, finish

        created = ax is None
        if created:
            fig, ax = plt.subplots(figsize=(6, 3.6), constrained_layout=True)
        else:
            fig = ax.figure
        order = np.argsort(self.x)
        fit_label = f"fit: {estimate_text(record)}" if record else "fit"
        ax.plot(self.x / x_scale, self.t_us, "o", ms=4, label="measured")
        ax.plot(self.x[order] / x_scale, self.fitted_us[order], "-", lw=1, label=fit_label)
        ax.set(xlabel=x_label, ylabel="time (us)", title=title)
        ax.legend(fontsize=8)
        finish(fig)
        return detach(fig) if created else fig  # a figure left open is shown twice in Jupyter

    def plot_residuals(self, *, title: str = "", x_label: str = "x", x_scale: float = 1.0, axes=None,
                       record: dict | None = None):
        """Standardized residuals against fitted time and against x, and a normal Q-Q plot. With the
        parameter's ``record``, the title states the estimate and its 95% CI, as the line's legend
        does: a residual figure is often the only one a parameter has to itself."""
        import matplotlib.pyplot as plt
        from scipy import stats

        from .plotting import detach, finish

        created = axes is None
        if created:
            fig, axes = plt.subplots(1, 3, figsize=(13, 3.4), constrained_layout=True)
        else:
            fig = axes[0].figure
        a0, a1, a2 = axes
        a0.scatter(self.fitted_us, self.std_resid, s=14)
        a0.set(xlabel="fitted time (us)", ylabel="standardized residual")
        a1.scatter(self.x / x_scale, self.std_resid, s=14)
        # symlog where a point sits at zero work (the intercept's anchor): a log axis would drop it
        a1.set(xlabel=x_label, ylabel="standardized residual", xscale="log" if np.all(self.x > 0) else "symlog")
        for ax in (a0, a1):
            ax.axhline(0, color="k", lw=0.8)
            ax.axhline(OUTLIER_Z, color="r", lw=0.6, ls=":")
            ax.axhline(-OUTLIER_Z, color="r", lw=0.6, ls=":")
        (osm, osr), (slope, icpt, _) = stats.probplot(self.std_resid, dist="norm")
        a2.scatter(osm, osr, s=14)
        a2.plot(osm, slope * np.asarray(osm) + icpt, "k-", lw=0.8)
        a2.set(xlabel="normal quantile", ylabel="ordered residual", title="Q-Q")
        flag_text = "; ".join(self.flags) if self.flags else "no flags"
        estimate = f": {estimate_text(record)}" if record else ""
        fig.suptitle(f"{title}{estimate}   [{self.method}; R²={self.r2:.5f}; {flag_text}]", fontsize=9)
        finish(fig)
        return detach(fig) if created else fig


def _interference_flags(fit: LinearTimeFit, rel_halfwidth: float, bias_rel: float) -> list[str]:
    """The flag of a parameter whose points show interference inside the outlier cut that biases it
    materially (see ``INTERFERENCE_BIAS_PER_SKEW``), or none. ``bias_rel``: the parameter's own bias,
    as a share of it, positive where its estimate is too high (the points' biases through the fit)."""
    z = fit.diagnostics.get("interference_skew_z")
    if z is None or not z > INTERFERENCE_FLAG_Z or not math.isfinite(bias_rel):
        return []
    if not abs(bias_rel) > max(INTERFERENCE_MATERIAL_OF_CI * rel_halfwidth, INTERFERENCE_MATERIAL_REL):
        return []
    direction = "high" if bias_rel > 0 else "low"
    return [f"interference inside the outlier cut: the points' samples skew right (z={z:.1f}); the value may be "
            f"about {abs(bias_rel):.2%} {direction} (estimated from the skew), and its CI is widened by that"]


def estimate_text(record: dict) -> str:
    """A record's value, unit and 95% CI as a figure states them; "no CI" where it has none (a
    record without one is flagged, and a figure must not look as if it had one)."""
    text = f"{record['value']:.5g} {record.get('unit', '')}".rstrip()
    if not record.get("ci95"):
        return f"{text} (no CI)"
    lo, hi = record["ci95"]
    return f"{text} (95% CI {lo:.5g} to {hi:.5g})"


def _record(value, ci, unit, fit: LinearTimeFit, flags, source, ci_method) -> dict:
    return make_record(value, ci, unit, n=fit.n, method=f"{fit.method}; {ci_method}", r2=fit.r2, flags=flags,
                       diagnostics=fit.diagnostics, source=source)


def make_record(value, ci95, unit: str, *, n: int, method: str, r2: float | None = None, flags=(),
                diagnostics: dict | None = None, source: str | None = None) -> dict:
    """The one place a parameter record is built: every fit, linear or not, ends here, so that every
    record carries the same fields (value, ci95, unit, n, method, r2, flags, diagnostics, source,
    and when it was fitted) and a CI that is not a pair of finite numbers around the value is
    flagged rather than written as if it were one."""
    from .timestamps import utc_now

    value = float(value) if not isinstance(value, bool) else value
    lo, hi = (float(ci95[0]), float(ci95[1])) if ci95 is not None else (None, None)
    flags = [str(f) for f in flags]
    if lo is not None and not (math.isfinite(lo) and math.isfinite(hi)):
        flags.append("CI not estimable")
        lo = hi = None
    elif lo is not None and not lo <= value <= hi:
        flags.append(f"the value lies outside its own CI [{lo:.6g}, {hi:.6g}]")
    rec = {"value": value, "ci95": None if lo is None else [lo, hi], "unit": unit, "n": int(n), "method": method,
           "r2": None if r2 is None else float(r2), "flags": flags, "diagnostics": dict(diagnostics or {}),
           "source": source, "measured": utc_now()}
    return {k: v for k, v in rec.items() if v is not None}


@dataclass
class FitResult:
    """What one calibration's fit gives: a record per parameter it could fit, the model behind each
    (for the plots), and for every other parameter it declares, why there is no record. Nothing a
    calibration promises disappears without a reason the notebook prints."""

    calibration: str
    records: dict = field(default_factory=dict)
    models: dict = field(default_factory=dict)
    failures: dict = field(default_factory=dict)

    def __repr__(self):
        return (f"<FitResult {self.calibration}: {len(self.records)} fitted, {len(self.flagged)} flagged, "
                f"{len(self.failures)} not fitted>")

    def _repr_html_(self):
        from .display import fit_result_html

        return fit_result_html(self)

    @property
    def flagged(self) -> dict:
        return {name: rec["flags"] for name, rec in self.records.items() if rec.get("flags")}

    def summary(self) -> str:
        """Flags and failures in a few lines: what a reader must know before using the numbers."""
        lines = []
        if self.flagged:
            lines.append("fits flagged:")
            lines += [f"  {name}: {'; '.join(flags)}" for name, flags in self.flagged.items()]
        if self.failures:
            lines.append("not fitted:")
            lines += [f"  {name}: {why}" for name, why in self.failures.items()]
        return "\n".join(lines) or "every parameter fitted; no fit flagged."

    def table(self):
        """The parameters as a table with numbers as numbers (value, CI bounds, half-width in
        percent, n), flags as text, and a row per parameter that could not be fitted."""
        import pandas as pd

        from .display import is_bracket

        rows = []
        for name, rec in self.records.items():
            lo, hi = rec.get("ci95") or (float("nan"), float("nan"))
            value = rec["value"]
            # a bracket (the largest buffer compiled without spills) has no ±: its ends are the grid's
            bracket = is_bracket(rec)
            pm = 100 * (hi - lo) / 2 / abs(value) if value and not bracket else float("nan")
            rows.append({"name": name, "value": value, "ci95_low": lo, "ci95_high": hi, "ci95_pm_pct": pm,
                         "interval": None if rec.get("ci95") is None else ("bracket" if bracket else "95% CI"),
                         "unit": rec.get("unit"), "n": rec.get("n"), "flags": "; ".join(rec.get("flags", []))})
        rows += [{"name": name, "flags": f"NOT FITTED: {why}"} for name, why in self.failures.items()]
        return pd.DataFrame(rows, columns=["name", "value", "ci95_low", "ci95_high", "ci95_pm_pct", "interval", "unit",
                                           "n", "flags"])


def fit_linear_time(x, t_us, *, n_samples=None, se_us=None, robust: bool = False,
                    cov_type: str = "nonrobust", fitting: str | None = None, n_inliers=None,
                    inlier_skew=None) -> LinearTimeFit:
    """Fit ``t_us = t0 + x * slope`` by weighted least squares (or Huber's M-estimator).

    ``se_us``: each point's standard error from its own samples, if known; only used to test for
    lack of fit, never to weight (a point that happened to be quiet must not dominate).
    ``n_inliers``, ``inlier_skew``: each point's count and skewness of the samples its time averages
    (``calib.timing.Measurement``), if known, with ``se_us``: right skew is interference inside the
    outlier cut, whose bias the CIs are then widened by (see ``INTERFERENCE_BIAS_PER_SKEW``).
    ``fitting``: what is being fitted (a parameter's name), for the message of points refused."""
    # the estimators themselves, not statsmodels.api (the same classes, which also imports its
    # formulas, time series and graphics): 0.3-0.5 s less in every notebook's fit phase on a 2-core
    # CPU host (2026-12-02), and the last notebook's fit ends the run
    from statsmodels.regression.linear_model import OLS, WLS
    from statsmodels.tools.tools import add_constant

    x, t_us, n_samples = _checked_points(x, t_us, n_samples, fitting)
    scale = float(np.max(np.abs(x)))  # conditioning: x in [0, 1]
    design = add_constant(x / scale, has_constant="add")
    # ... and t in (0, 1]: the estimates scale with t exactly, and weights of 1/t² stay representable
    # for any time a float holds (times of 1e200 us had made the weights 0 and statsmodels fail)
    t_unit = float(np.max(t_us))
    t_norm = t_us / t_unit

    first = OLS(t_norm, design).fit()
    fitted0 = first.fittedvalues
    fitted0 = np.where(fitted0 > 0, fitted0, t_norm)
    weights = n_samples / fitted0**2

    if robust:
        sw = np.sqrt(weights)
        res = _huber(t_norm * sw, design * sw[:, None])
        method = "Huber M-estimate, weights n/t²"
        dof = max(x.size - 2, 1)
        resid_w = (t_norm - design @ res.params) * sw
        scale_est = float(res.scale)
        fitted = design @ res.params
    else:
        res = WLS(t_norm, design, weights=weights).fit(cov_type=cov_type)
        method = f"WLS t ~ x, weights n/t², {'classical SE' if cov_type == 'nonrobust' else cov_type}"
        dof = float(res.df_resid)
        resid_w = res.wresid
        scale_est = math.sqrt(res.scale)
        fitted = res.fittedvalues
    params = np.asarray(res.params) * t_unit
    bse = np.asarray(res.bse) * t_unit
    fitted = np.asarray(fitted) * t_unit
    # statsmodels uses the normal distribution for robust covariances; with ~10 points per fit the
    # t distribution is the honest choice, whichever covariance estimate is used.
    from scipy import stats

    q = stats.t.ppf(0.975, dof)
    icpt_ci = (params[0] - q * bse[0], params[0] + q * bse[0])
    slope_ci = ((params[1] - q * bse[1]) / scale, (params[1] + q * bse[1]) / scale)
    interference = _interference(t_us, se_us, n_inliers, inlier_skew)
    if interference:
        # each point's bias (us) through the fit's own weights: the line's bias, parameter by parameter.
        # A pooled share of every time was right only where interference scaled with the time; a delay
        # of the same microseconds at every point lands on the intercept (8-12% there, 2026-12-07)
        delta = interference.pop("delta_us") / t_unit
        xtw = design.T * weights
        b = np.linalg.solve(xtw @ design, xtw @ delta) * t_unit
        interference.update(interference_intercept_bias_us=float(b[0]), interference_slope_bias_us=float(b[1] / scale))
        if interference["interference_skew_z"] > INTERFERENCE_WIDEN_Z:
            icpt_ci = _away_from_bias(icpt_ci, b[0])
            slope_ci = _away_from_bias(slope_ci, b[1] / scale)
            interference["interference_ci_widened"] = True
            method += "; CI widened by the bias of interference inside the outlier cut"

    r2 = weighted_r2(t_norm, weighted_residuals=resid_w, weights=weights)
    std_resid = resid_w / scale_est if scale_est > 0 else np.zeros_like(resid_w)

    fit = LinearTimeFit(x=x, t_us=t_us, weights=weights / t_unit / t_unit, method=method, intercept_us=float(params[0]),
                        intercept_ci95=(float(icpt_ci[0]), float(icpt_ci[1])), slope_us=float(params[1] / scale),
                        slope_ci95=(float(slope_ci[0]), float(slope_ci[1])), slope_se=float(bse[1] / scale),
                        dof=dof, r2=float(r2), fitted_us=np.asarray(fitted), std_resid=np.asarray(std_resid))
    _diagnose(fit, design, t_norm, weights)
    if interference:
        fit.diagnostics.update(interference)
    if se_us is not None:
        _lack_of_fit(fit, np.asarray(se_us, dtype=float))
    return fit


def _interference(t_us, se_us, n_inliers, inlier_skew) -> dict | None:
    """The points' pooled inlier skewness (its z against 0, the skew of symmetric noise) and the
    relative bias of their times it implies (``INTERFERENCE_BIAS_PER_SKEW``), or None where the points
    do not carry what it takes. Each point's skewness is weighted by its inlier count; its variance
    under normal noise is 6 (n - 2) / ((n + 1) (n + 3))."""
    if se_us is None or n_inliers is None or inlier_skew is None:
        return None
    t = np.asarray(t_us, dtype=float)
    se = np.asarray(se_us, dtype=float)
    n = np.asarray(n_inliers, dtype=float)
    g = np.asarray(inlier_skew, dtype=float)
    if not t.shape == se.shape == n.shape == g.shape:
        return None
    ok = np.isfinite(g) & np.isfinite(se) & (se > 0) & np.isfinite(n) & (n >= 3) & (t > 0)
    if not ok.any():
        return None
    delta_us = np.zeros_like(t)  # each point's bias, signed: symmetric noise's skews average out
    delta_us[ok] = INTERFERENCE_BIAS_PER_SKEW * g[ok] * se[ok] * np.sqrt(n[ok])  # SD from the SE of the mean
    t, se, n, g = t[ok], se[ok], n[ok], g[ok]
    var_g = 6.0 * (n - 2) / ((n + 1) * (n + 3))
    skew = float(np.sum(n * g) / np.sum(n))
    z = skew / float(np.sqrt(np.sum(n * n * var_g)) / np.sum(n))
    bias = float(np.sum(n * delta_us[ok] / t) / np.sum(n))
    return {"interference_skew": skew, "interference_skew_z": z, "interference_bias_rel": max(bias, 0.0),
            "delta_us": delta_us}


def _away_from_bias(ci, bias):
    """``ci`` extended by ``|bias|`` on the side the bias hides: an estimate ``bias`` too high has its
    truth below the interval's lower end, one too low (a negative bias) above its upper end."""
    lo, hi = ci
    return (lo - bias, hi) if bias > 0 else (lo, hi - bias)


def _huber(t_w, design_w):
    """Huber's M-estimate of the weighted line, its scale by Huber's proposal 2, not RLM's default
    MAD: with the 6-16 points of a sweep the MAD is too noisy a scale for a t interval on n - 2
    degrees of freedom. With it the slope's CI covered 91% at 6-8 points, and the simulated
    device's robust calibrations 85-90% for many rates, with residuals beyond 4 "sd" flagged in
    10-20% of them; with proposal 2, 94-96%. A perfect fit (noiseless times) has no scale for
    proposal 2 to solve for: the MAD's scale of 0 is the answer there."""
    from statsmodels.robust.norms import HuberT
    from statsmodels.robust.robust_linear_model import RLM
    from statsmodels.robust.scale import HuberScale

    model = RLM(t_w, design_w, M=HuberT())
    try:
        with np.errstate(divide="ignore", invalid="ignore"):
            return model.fit(scale_est=HuberScale())
    except ValueError:  # statsmodels: "NaN, inf or invalid value detected in weights"
        import warnings

        with warnings.catch_warnings():  # "Estimated scale is 0.0": the perfect fit this path is for
            warnings.simplefilter("ignore")
            return model.fit()


def _checked_points(x, t_us, n_samples, fitting: str | None = None):
    """The points as float arrays, or a ValueError that says what is wrong with them: a NaN or an
    infinite time (a broken timer, a point whose every sample was cut) or a time of zero had ended
    in statsmodels' "SVD did not converge" or "exog contains inf or nans", which name no point."""
    x = np.asarray(x, dtype=float)
    t_us = np.asarray(t_us, dtype=float)
    n_samples = np.ones_like(x) if n_samples is None else np.asarray(n_samples, dtype=float)
    said = f"{fitting}: " if fitting else ""
    if not x.shape == t_us.shape == n_samples.shape or x.ndim != 1:
        raise ValueError(f"{said}x, t_us and n_samples must be 1-D and of one length, got shapes {x.shape}, "
                         f"{t_us.shape}, {n_samples.shape}")
    if x.size < 3:
        raise ValueError(f"{said}a linear time model needs at least 3 points, got {x.size}")
    refuse_unusable_points({"x": x, "time_us": t_us, "n_samples": n_samples}, positive=("time_us", "n_samples"),
                           fitting=fitting)
    if np.unique(x).size < 2:
        raise ValueError(f"{said}all points have the same size: the slope is not identified")
    return x, t_us, n_samples


# How refuse_unusable_points calls a column in its message ("1 of 10 points have a time that ...");
# any other column by its own name.
_POINT_LABELS = {"x": "an x", "time_us": "a time", "t_us": "a time", "n_samples": "a sample count"}


def refuse_unusable_points(columns: dict, *, positive=(), fitting: str | None = None) -> None:
    """ValueError naming the first point that no fit can use, or nothing: ``columns`` maps a name
    to one value per point (x, times, sample counts, a nonlinear model's several inputs), each of
    which must be finite, and those named in ``positive`` (times, sample counts, whatever the model
    divides by or takes the logarithm of) above zero too. The message says how many points fail
    which check, then the first such point by its position among the points given, with all of its
    values, and, given ``fitting`` (the parameter or calibration being fitted), begins with it.

    Every fit of measured points checks them here: the linear fits (:func:`fit_linear_time`) and the
    nonlinear ones (the L2 ramp, the occupancy model), where a NaN had come out as scipy's "array
    must not contain infs or NaNs" or "no start converged", and a time of zero as a fit."""
    arrays = {name: np.asarray(values, dtype=float).ravel() for name, values in columns.items()}
    n = len(next(iter(arrays.values()))) if arrays else 0
    for name, values in arrays.items():
        if values.size != n:
            raise ValueError(f"{fitting + ': ' if fitting else ''}{name} has {values.size} values for {n} points")
    for name, values in arrays.items():
        must = name in positive
        ok = np.isfinite(values) & (values > 0) if must else np.isfinite(values)
        if not ok.all():
            bad = np.flatnonzero(~ok)
            i = int(bad[0])
            label = _POINT_LABELS.get(name) or f"{'an' if name[:1] in tuple('aeiou') else 'a'} {name}"
            what = f"{label} that is not {'a finite positive number' if must else 'finite'}"
            point = ", ".join(f"{k} {v[i]:.10g}" for k, v in arrays.items())
            raise ValueError(f"{fitting + ': ' if fitting else ''}{bad.size} of {n} points have {what} "
                             f"(point {i}: {point})")


def weighted_r2(t_us, *, weighted_residuals, weights) -> float:
    """R² of a weighted fit: weighted residual sum of squares against the weighted spread of t."""
    t_us = np.asarray(t_us, dtype=float)
    ss_tot = float(np.sum(weights * (t_us - np.average(t_us, weights=weights)) ** 2))
    return 1.0 - float(np.sum(np.asarray(weighted_residuals) ** 2)) / ss_tot if ss_tot > 0 else float("nan")


def fit_timed(group, x, *, robust: bool = False, fitting: str | None = None) -> LinearTimeFit:
    """``fit_linear_time`` over a tidy sweep frame's rows: times, sample counts and standard
    errors from the frame's columns, the work ``x`` from the caller."""
    def column(name):
        return group[name].to_numpy() if name in group else None

    return fit_linear_time(np.asarray(x, dtype=float), group["time_us"].to_numpy(),
                           n_samples=group["n_samples"].to_numpy(), se_us=column("se_us"), robust=robust,
                           fitting=fitting, n_inliers=column("n_inliers"), inlier_skew=column("inlier_skew"))


def fit_rates(frame, calibration: str, *, work, name, scale: float, unit: str, by: str | list | None = None,
              robust: bool = False, source: str | None = None) -> FitResult:
    """``t = t0 + work / rate`` per group of ``by`` (or once) over a sweep frame's rows of
    ``calibration``: rate records and fits keyed by ``name(group)`` (or ``name``). A group that
    cannot be fitted (too few points, one size only) is a failure with its reason, not a gap."""
    frame = frame[frame["calibration"] == calibration] if len(frame) else frame
    result = FitResult(calibration)
    # No point measured (a device too small for every size): calibrations.fit reports each parameter as
    # not fitted. Grouping by a column the empty frame lacks had raised KeyError and failed the notebook.
    if by and not len(frame):
        return result
    groups = frame.groupby(by) if by else [(None, frame)]
    for key, g in groups:
        param = name(key) if by else name
        if len(g) < 3:
            result.failures[param] = f"{len(g)} measured point(s); a line needs at least 3"
            continue
        try:
            result.models[param] = f = fit_timed(g, work(g), robust=robust, fitting=param)
        except ValueError as exc:
            result.failures[param] = str(exc)
            continue
        result.records[param] = f.rate_record(scale, unit, source=source)
    return result


def _diagnose(fit: LinearTimeFit, design: np.ndarray, t_norm: np.ndarray, weights: np.ndarray):
    """Fill ``fit.flags``/``fit.diagnostics``: low R², curvature, runs of residual signs, outliers.
    ``t_norm`` and ``weights`` are the fit's own, the times in units of the largest."""
    from statsmodels.regression.linear_model import WLS

    d = fit.diagnostics
    d["n_points"] = fit.n
    d["r2"] = fit.r2
    if fit.n < MIN_POINTS:
        fit.flags.append(f"few points: {fit.n}")
    if not fit.r2 >= MIN_R2:
        fit.flags.append(f"low R²: {fit.r2:.4f}")
    if fit.slope_ci95[1] < 0:  # not "reaches zero": the data say the time falls as the work grows
        fit.flags.append("negative slope: the time falls as the work grows, where it must rise")
    elif fit.slope_ci95[0] <= 0:
        fit.flags.append("slope CI reaches zero: the rate is not identified")

    if fit.n >= 5:
        # Curvature: does a squared term explain what the line leaves?
        xs = design[:, 1]
        quad = WLS(t_norm, np.column_stack([design, xs**2]), weights=weights).fit()
        p_curve = float(quad.pvalues[2])
        line = fit.fitted_us / float(np.max(fit.t_us))  # the line in the units of t_norm
        gap = float(np.max(np.abs(quad.fittedvalues - line) / np.abs(line)))
        d["curvature_p"], d["curvature_rel"] = p_curve, gap
        if p_curve < PATTERN_P and gap > MATERIAL_REL:
            fit.flags.append(f"curvature: the line misses by up to {gap:.1%} (p={p_curve:.1e})")
        # Runs of residual signs along x (Wald-Wolfowitz): a pattern the line misses. Not where the
        # residuals are rounding errors (a noiseless line), whose signs can run one way: every fit
        # of a noiseless simulated device had been flagged, with p = 0.
        p_runs = _runs_test_p(fit.std_resid[np.argsort(fit.x, kind="stable")])
        miss = float(np.max(np.abs(fit.t_us - fit.fitted_us) / np.abs(fit.fitted_us)))
        d["runs_p"] = p_runs
        if p_runs < PATTERN_P and miss > ROUNDING_REL:
            fit.flags.append(f"patterned residuals (runs test p={p_runs:.1e})")
    n_out = int(np.sum(np.abs(fit.std_resid) > OUTLIER_Z))
    d["n_outliers"] = n_out
    if n_out:
        fit.flags.append(f"{n_out} outlier(s) beyond {OUTLIER_Z:g} sd")


def _lack_of_fit(fit: LinearTimeFit, se_us: np.ndarray):
    """Chi-square of the residuals against the points' own measurement errors."""
    from scipy import stats

    ok = np.isfinite(se_us) & (se_us > 0)
    if ok.sum() < 4:
        return
    resid = (fit.t_us - fit.fitted_us)[ok]
    chi2 = float(np.sum((resid / se_us[ok]) ** 2))
    dof = int(ok.sum()) - 2
    ratio = math.sqrt(chi2 / dof)
    p = float(stats.chi2.sf(chi2, dof))
    worst = float(np.max(np.abs(resid) / np.abs(fit.fitted_us[ok])))
    fit.diagnostics["resid_to_noise_ratio"] = ratio
    fit.diagnostics["lack_of_fit_p"] = p
    fit.diagnostics["max_rel_resid"] = worst
    if p < PATTERN_P and ratio > LACK_OF_FIT_RATIO and worst > MATERIAL_REL:
        fit.flags.append(f"lack of fit: residuals {ratio:.1f}x the measurement noise, up to {worst:.1%} of the time")


def _runs_test_p(resid: np.ndarray) -> float:
    from scipy import stats

    signs = resid > 0
    n1, n2 = int(signs.sum()), int((~signs).sum())
    if n1 == 0 or n2 == 0:
        return 0.0 if resid.size >= 8 else 1.0
    runs = 1 + int(np.sum(signs[1:] != signs[:-1]))
    mean = 2.0 * n1 * n2 / (n1 + n2) + 1
    var = 2.0 * n1 * n2 * (2.0 * n1 * n2 - n1 - n2) / ((n1 + n2) ** 2 * (n1 + n2 - 1))
    if var <= 0:
        return 1.0
    z = (runs - mean) / math.sqrt(var)
    return float(stats.norm.cdf(z))  # one-sided: too few runs means a pattern
