"""The L2 ramp's CI where the residuals' structure is longer-ranged than the CI can follow: session 3's
H200 quick runs (2026-12-02, 128 working sets, 4 GiB and 1 GiB launches alternating) on host C (c5,
quick #2) and host B (c2, quick #2), and host C's fit planted with such a structure. See
``cache_hierarchy.STRUCTURE_FACTOR``."""

import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calib import calibrations
from calib.calibrations import cache_hierarchy as l2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from l2_planting import fitted_terms  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parent.parent
H200_L2 = 62914560
H200_MEMORY = 150_000_000_000


def _sweep(host):
    return pd.read_csv(FIXTURES / f"h200_l2_quick128_2026-12-02-{host}.csv")


def _fit(frame):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return calibrations.fit(l2.ID, frame)


def _flagged(rec):
    return any("residuals correlate along the working sets" in f for f in rec["flags"])


def _lag_corr(h, lag):
    z = h.resid[h.working_set][np.argsort(h.w[h.working_set], kind="stable")]
    z = z - z.mean()
    return float(z[lag:] @ z[:-lag] / (z @ z))


@pytest.mark.parametrize("host, flagged", [("c5", True), ("c2", False)])
def test_the_recorded_hosts_structure_is_flagged_where_it_is_long_ranged(host, flagged):
    """Host C's residuals alternate in sign between long and short launches and correlate ten working
    sets (0.4 octaves) apart; its CI is widened x1.58 (end ±7.2%) and both ends are flagged. Host B's
    widen x1.22 (±3.5%) and are not."""
    result = _fit(_sweep(host))
    h = result.models["hinge"]
    for name in (l2.RAMP_END, l2.CAPACITY):
        assert _flagged(result.records[name]) is flagged, (name, result.records[name]["flags"])
    factor = result.records[l2.RAMP_END]["diagnostics"]["end_ci_correlation_factor"]
    if flagged:
        assert factor > 1.45 and _lag_corr(h, 1) < -0.3 and _lag_corr(h, 2) > 0.3 and _lag_corr(h, 9) < -0.2
    else:
        assert 1.1 < factor < 1.3 and abs(_lag_corr(h, 9)) < 0.2


def _planted(grid, hinge, rng, share, length_octaves=0.5):
    """The fit's model with its variance function's scatter, a ``share`` of which is ±a(log2 W) by launch
    length (+ for the long, - for the short), a a Gaussian process in log2 W with an exponential kernel
    of ``length_octaves``; the rest independent. The bandwidth series keeps independent noise. A point's
    own noise is 0.13% with six samples (H200, session 2), as 1/sqrt of the plan's samples otherwise."""
    x, b, t, slope, ws, m = fitted_terms(grid, hinge)
    n = grid["samples"].fillna(6).to_numpy(float)
    own = 1.3e-3 * np.sqrt(6 / n)
    sd = np.sqrt(((hinge.scatter[0] * (1 - m) * t) ** 2 + (hinge.scatter[1] * m * t) ** 2) * ws
                 + (hinge.scatter[2] * slope) ** 2 + (own * t) ** 2)
    kernel = np.exp(-np.abs(x[:, None] - x[None, :]) / length_octaves)
    a = np.linalg.cholesky(kernel + 1e-9 * np.eye(len(x))) @ rng.standard_normal(len(x))
    sign = np.where(b > math.sqrt(float(b[ws].min() * b[ws].max())), 1.0, -1.0)
    z = math.sqrt(1 - share) * rng.standard_normal(len(x)) + math.sqrt(share) * sign * a
    z = np.where(ws, z, rng.standard_normal(len(x)))
    return grid.assign(time_us=t + sd * z, n_samples=n, se_us=t * own, calibration=l2.ID)


@pytest.mark.parametrize("share", [0.8, 0.0])
def test_a_planted_long_ranged_structure_is_wider_than_the_ci_and_flagged(share):
    """Host C's fit planted over the quick plan. With 80% of its scatter as a structure like its own
    (residual correlations -0.5, +0.5, -0.3, +0.3 at lags 1-4 against its -0.39, +0.43, -0.32, +0.38)
    the end's errors spread twice what its CI claims and the records are flagged (the factor is itself
    an estimate): over 128 working sets with six samples, 30 draws, sd 6.4% against ±5.7%/1.96, flagged
    in 5-7 of 8; over the 256 with four that the quick plan takes now, 8 draws, sd 5.1% against
    ±4.1%/1.96 (ratio 2.45), flagged in 7, covered in 5. With the same scatter independent the CI
    matches the errors (256 with four: sd 1.6% against ±3.0%/1.96, ratio 1.03) and nothing is flagged."""
    hinge = _fit(_sweep("c5")).models["hinge"]
    grid = pd.DataFrame(l2.plan("quick", l2_bytes=H200_L2, memory_bytes=H200_MEMORY))
    errors, claimed, flags = [], [], 0
    for seed in range(8):
        end = _fit(_planted(grid, hinge, np.random.default_rng(seed), share)).records[l2.RAMP_END]
        errors.append(math.log(end["value"]) - hinge.x2 * math.log(2))
        claimed.append(math.log(end["ci95"][1] / end["ci95"][0]) / 2 / 1.96)
        flags += _flagged(end)
    ratio = np.std(errors) / np.median(claimed)
    if share:
        assert ratio > 1.4 and flags >= 4, (ratio, flags)
    else:
        assert ratio < 1.4 and flags <= 1, (ratio, flags)


def _pm_log2(x, ci):
    return (2 ** ci[1] - 2 ** ci[0]) / 2 / 2**x


@pytest.mark.parametrize("share", [0.5, 0.8, 0.85])
def test_an_earlier_end_share_does_not_bring_the_structured_hosts_ci_within_five_percent(share):
    """Where DRAM serves 50%, 80% or 85% of the reads instead of END_SHARE's 90%: host C's CI stays
    ±6.4-6.6% and widened x1.55-1.60 (±7.2%, x1.58 at 90%), host B's ±2.7-2.9% (±3.5%) and x1.23-1.24.
    The widening comes from the structure, not from the flat top of the approach to DRAM, so naming an
    earlier share moves the number the heuristics read (205 and 239 MB against 291 on host C) without
    making it honest at ±5%. The same on every recorded H200 quick suite: END_SHARE's comment."""
    for host, structured in (("c5", True), ("c2", False)):
        h = _fit(_sweep(host)).models["hinge"]
        x, ci = h.ci_share_log2(share)
        x_end, ci_end = h.ci_share_log2(l2.END_SHARE)
        assert x_end == h.x2 and ci_end == h.ci_log2("x2")
        factor = math.sqrt(h.correlation_factor("x2", share))
        pm = _pm_log2(x, ci)
        assert h.x_steady < x < h.x2
        assert bool(pm > 0.05 and factor > l2.STRUCTURE_FACTOR) is structured, (host, pm, factor)
        assert bool(pm < 0.04 and factor < 1.3) is not structured, (host, pm, factor)
        assert pm > 0.75 * _pm_log2(x_end, ci_end), (host, pm)


def _residuals_by_working_set(h):
    ws = h.working_set
    return pd.Series(h.resid[ws], index=h.w[ws].astype(int)).groupby(level=0).mean()


def test_the_structure_and_the_end_are_shared_by_hosts_c_and_e_and_not_by_host_b():
    """The structure is the H200's, not a host's or a run's: host C's quick #2 (session 3) and host E's
    first ascending sweep (session 4 call 2, bench/l2_order_probe.py) correlate 0.87 by working set, as
    two sweeps on host E do (0.87), and put the end at 290.7 and 292.8 MB, 0.7% apart where each CI
    says ±7.2-7.3%. Over the 15 recorded quick suites hosts C and E-H correlate 0.82-0.93 with one
    another, and the means of the end of those and host D lie within 287.7-295.6 MB (sd 1.0%); host B
    correlates 0.22-0.43 with all of them, and its end, 315.3 MB ±3.5% here (unflagged), lies 8% above
    host C's. See the module's docstring."""
    fits = {host: _fit(frame) for host, frame in (
        ("B", _sweep("c2")), ("C", _sweep("c5")),
        ("E", pd.read_csv(ROOT / "bench/results/2026-12-02-h200-suites-session4/call2/l2_ascending.csv")))}
    z = {host: _residuals_by_working_set(r.models["hinge"]) for host, r in fits.items()}
    ends = {host: r.records[l2.RAMP_END] for host, r in fits.items()}
    half = {host: math.log(e["ci95"][1] / e["ci95"][0]) / 2 for host, e in ends.items()}

    def corr(a, b):
        j = z[a].index.intersection(z[b].index)
        assert len(j) == 127
        return float(np.corrcoef(z[a][j], z[b][j])[0, 1])

    assert corr("C", "E") > 0.8 and corr("B", "C") < 0.5 and corr("B", "E") < 0.5
    apart = abs(math.log(ends["C"]["value"] / ends["E"]["value"]))
    assert apart < 0.25 * min(half["C"], half["E"]), (apart, half)
    assert math.log(ends["B"]["value"] / ends["C"]["value"]) > half["B"], (ends["B"]["value"], half["B"])


def test_with_the_recorded_structure_kept_the_flagged_ci_is_wider_than_a_repetitions_error():
    """The other planting: host C's recorded quick #2 as it is (its structure included, fixed in W as on
    the H200s) plus a run's own noise, sqrt(1 - 0.90) of the variance function's scatter (0.90: the
    lowest correlation between host C's three runs), against the end of host C's own fit. The end's
    errors then spread 0.8% (sd, 8 draws; host C's three runs 1.4%, the six hosts' means 1.0%) where
    the flagged CI claims 3.8%, and every CI covers: against repetition on one grid it is too wide, not
    too narrow. What it may miss is what that grid makes of the structure (bench/l2_order_probe.py
    --phases measures that on an H200)."""
    frame = _sweep("c5").sort_values("working_set_bytes", kind="stable")
    h = _fit(frame).models["hinge"]
    assert np.allclose(h.t_us, frame["time_us"].to_numpy())  # the fit's order is the frame's
    sd = np.where(h.working_set, math.sqrt(1 - 0.90) * np.sqrt(h.var), 1.3e-3 * h.t_us)
    errors, claimed, covered = [], [], 0
    for seed in range(8):
        noise = sd * np.random.default_rng(seed).standard_normal(len(sd))
        end = _fit(frame.assign(time_us=frame["time_us"].to_numpy() + noise)).records[l2.RAMP_END]
        assert _flagged(end)
        errors.append(math.log(end["value"]) - h.x2 * math.log(2))
        claimed.append(math.log(end["ci95"][1] / end["ci95"][0]) / 2 / 1.96)
        covered += end["ci95"][0] <= 2**h.x2 <= end["ci95"][1]
    ratio = np.std(errors) / np.median(claimed)
    assert ratio < 0.5 and covered == 8, (ratio, covered)


def _first_samples(frame, k):
    """The recorded run as a k-sample run would have it: each working-set point's first k raw samples
    (after the warm-ups, in the order taken) through the backend's own estimate."""
    from calib.timing import Measurement

    rows = frame.copy()
    ws = rows["series"] == "working_set"
    ms = [Measurement([float(v) for v in raw.split()][:k]) for raw in rows.loc[ws, "samples_us"]]
    rows.loc[ws, "time_us"] = [m.center_us for m in ms]
    rows.loc[ws, "se_us"] = [m.se_us for m in ms]
    rows.loc[ws, "n_samples"] = k
    return rows.drop(columns="samples_us")


def test_four_samples_a_point_keep_the_flag_of_a_structured_hosts_full_grid():
    """Host H's full run (session 4 call 5, 2026-12-02: 256 working sets, six samples each, raw samples
    kept) with the quick bandwidth series, each point cut to its first k samples: six and four give the
    end ±4.3% and keep the flag (x1.58, x1.52), where that host's quick suite of 128 working sets gave
    ±5.8%; three thin the correlation factor to 1.39, under STRUCTURE_FACTOR, and the flag goes (the
    first sample after the warm-ups runs 5-11% slow: WORKING_SET_SAMPLES), so the quick suite takes four."""
    frame = pd.read_csv(FIXTURES / "h200_l2_full256_2026-12-02-s4c5-samples.csv")
    quick_bw = {17, 34, 68, 102, 137, 205, 273}  # passes over L2/4 for the quick series' GiB per launch
    frame = frame[(frame["series"] == "working_set") | frame["passes"].isin(quick_bw)]
    assert (frame["series"] == "bandwidth").sum() == len(l2.BANDWIDTH_GIB["quick"])
    quick = l2.WORKING_SET_SAMPLES["quick"]
    ends = {k: _fit(_first_samples(frame, k)).records[l2.RAMP_END] for k in (6, quick, 3)}
    pm = {k: (e["ci95"][1] - e["ci95"][0]) / 2 / e["value"] for k, e in ends.items()}
    factor = {k: e["diagnostics"]["end_ci_correlation_factor"] for k, e in ends.items()}
    assert _flagged(ends[6]) and _flagged(ends[quick]) and pm[6] < 0.045 and pm[quick] < 0.045, (pm, factor)
    assert factor[3] < factor[quick] and not _flagged(ends[3]), factor
    assert abs(math.log(ends[quick]["value"] / ends[6]["value"])) < 0.01, (ends[quick]["value"], ends[6]["value"])
