"""The family models' error band (calib.heuristics.model_error): its fit covers planted errors at the
nominal rate on recordings it has not seen, the shipped band is today's model's on recordings no
correction was fitted on, ``pi95`` holds only on the recorded GPU, and a bad band file is refused
with the field named."""

import gzip
import hashlib
import json
import math
import random
import warnings
from pathlib import Path

import pytest

from calib import predict
from calib.heuristics import model_error as ME
from calib.profile import read_profile

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "profiles/nvidia-h200.json"
LAUNCH = {"pointwise": ({"op": "add", "n": 1 << 26, "dtype": "float32"}, {"vec": 4, "ept": 2, "block": 256,
                                                                          "grid": "cover"})}


def _planted_recordings(seed, count=20, per=600, host_sd=0.03):
    """Recordings of (predicted us, log error): errors of a scale that grows with the time, with
    heavy tails (Student t of 4 dof), as a model's are, and an offset of each recording's own (its
    host, its clocks: ``host_sd``), so that a band fitted on a recording itself covers it better
    than one fitted on the others."""
    rng = random.Random(seed)

    def scale(t):
        return 0.03 if t < 10 else 0.09

    def draw(offset):
        t = 10 ** rng.uniform(0, 4)
        z = rng.gauss(0, 1) / math.sqrt(sum(rng.gauss(0, 1) ** 2 for _ in range(4)) / 4)
        return t, 0.02 + offset + scale(t) * z

    return [[draw(off) for _ in range(per)] for off in [rng.gauss(0, host_sd) for _ in range(count)]]


@pytest.mark.parametrize("seed", range(5))
def test_a_band_fitted_on_other_recordings_covers_planted_errors_at_the_nominal_rate(seed):
    recs = _planted_recordings(seed, count=40, per=400, host_sd=0.02)
    cover = ME.leave_one_out_coverage(recs, min_bin=1000)
    assert 0.935 <= sum(cover) / len(cover) <= 0.965, cover
    fresh = [p for r in _planted_recordings(1000 + seed, count=40, per=500, host_sd=0.02) for p in r]
    me = ME.ModelError("x", {}, {"k": ME.fit_bins([p for r in recs for p in r], min_bin=1000)}, {})
    inside = sum(me.bin_for("k", t).log_lo <= e <= me.bin_for("k", t).log_hi for t, e in fresh)
    assert 0.935 <= inside / len(fresh) <= 0.965


def test_leaving_a_recording_out_is_what_the_coverage_measures():
    """With recordings of their own offsets and few of them, a band fitted on a recording itself
    covers it more often than the one fitted on the others, which is the honest figure."""
    recs = _planted_recordings(11, count=6, per=1500, host_sd=0.08)
    held_out = ME.leave_one_out_coverage(recs, min_bin=1000)
    everything = ME.fit_bins([p for r in recs for p in r], min_bin=1000)
    me = ME.ModelError("x", {}, {"k": everything}, {})
    in_sample = [sum(me.bin_for("k", t).log_lo <= e <= me.bin_for("k", t).log_hi for t, e in r) / len(r)
                 for r in recs]
    assert sum(held_out) < sum(in_sample) - 0.05, (held_out, in_sample)


def test_bins_of_too_few_errors_are_merged_and_the_narrow_launch_bound_bin_stays_narrow():
    recs = _planted_recordings(7)
    bins = ME.fit_bins([p for r in recs for p in r], min_bin=1000)
    assert all(b.n >= 1000 for b in bins) and sum(b.n for b in bins) == 20 * 600
    assert [b.upto_us for b in bins] == sorted(b.upto_us for b in bins) and math.isinf(bins[-1].upto_us)
    # half-decade edges; the planted scale changes at 10 us, so one edge is there
    assert 10.0 in [pytest.approx(b.upto_us) for b in bins[:-1]]
    first, last = bins[0], bins[-1]
    assert first.log_hi - first.log_lo < 0.5 * (last.log_hi - last.log_lo)
    # fewer errors than a bin needs: one bin
    assert len(ME.fit_bins([(5.0, 0.1), (500.0, -0.1)], min_bin=10)) == 1
    assert ME.fit_bins([]) == ()


def test_the_interval_is_the_band_widened_by_the_ci_in_quadrature():
    lo, hi = ME.widen(100.0, (97.0, 104.0), -0.10, 0.20)
    assert lo == pytest.approx(100 * math.exp(-math.hypot(0.10, math.log(100 / 97))))
    assert hi == pytest.approx(100 * math.exp(math.hypot(0.20, math.log(1.04))))
    # no CI: the band alone; a band that does not straddle 0 still contains the prediction
    assert ME.widen(100.0, None, -0.1, 0.2) == pytest.approx((100 * math.exp(-0.1), 100 * math.exp(0.2)))
    assert ME.widen(100.0, (100.0, 100.0), 0.05, 0.2)[0] == pytest.approx(100.0)
    # a CI that reaches 0 or infinity takes the interval there; one of NaN gives none
    up = 100 * math.exp(math.hypot(0.2, math.log(2)))
    assert ME.widen(100.0, (0.0, 200.0), -0.1, 0.2) == (0.0, pytest.approx(up))
    assert ME.widen(100.0, (50.0, math.inf), -0.1, 0.2)[1] == math.inf
    assert ME.widen(100.0, (math.nan, 120.0), -0.1, 0.2) is None


def test_a_time_on_a_bin_edge_is_binned_alike_when_fitted_and_when_predicted():
    edges = [10 ** (k * ME.BIN_WIDTH_LOG10) for k in range(-2, 10)]
    for edge in edges:
        for t in (math.nextafter(edge, 0), edge, math.nextafter(edge, math.inf)):
            k = ME._half_decade(t)
            assert ME._edge_us(k) <= t < ME._edge_us(k + 1), t


def test_quantile_interpolates_as_numpy_does():
    np = pytest.importorskip("numpy")
    xs = sorted(random.Random(3).gauss(0, 1) for _ in range(101))
    for p in (0.0, 0.025, 0.5, 0.975, 1.0):
        assert ME.quantile(xs, p) == pytest.approx(float(np.quantile(xs, p)))


# -- the shipped band -----------------------------------------------------------------------------

H100 = ROOT / "profiles/nvidia-h100-80gb-hbm3.json"
GPUS = {"NVIDIA H200": 20, "NVIDIA H100 80GB HBM3": 4}  # GPU model -> fewest recordings per kind


def _shipped(device="NVIDIA H200"):
    me = next((me for me in ME.shipped() if me.device == device), None)
    assert me is not None, f"calib/heuristics/model_error.json has no band of {device}"
    return me


def test_the_shipped_bands_cover_every_kind_and_were_fitted_on_no_corrections_recordings():
    assert sorted(me.device for me in ME.shipped()) == sorted(GPUS)
    training = ME.training_recordings()
    assert training, "the corrections' training recordings were not found"
    for device, fewest in GPUS.items():
        me = _shipped(device)
        assert set(me.bins) == {"pointwise", "normalization", "matmul_splitk"}
        for kind, recs in me.fitted_on.items():
            assert len(recs) >= fewest, (device, kind)
            for r in recs:
                assert r["recording"] not in training
                path = ROOT / r["recording"]
                assert hashlib.sha256(path.read_bytes()).hexdigest() == r["sha256"], r["recording"]
                live = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_text())
                assert live["device"]["name"] == device, r["recording"]
            assert sum(r["candidates"] for r in recs) == sum(b.n for b in me.bins[kind])


@pytest.mark.parametrize("kind", ["pointwise", "normalization", "matmul_splitk"])
@pytest.mark.parametrize("device", sorted(GPUS))
def test_the_shipped_band_is_todays_models_error_on_its_recordings_and_covers_each_left_out(device, kind):
    """Every recording a band lists, replayed with today's model and the profile it names, gives
    the band the file holds, bin for bin; and the band fitted on all but one recording holds 95% of
    that one's candidates on average. A model changed since the band was fitted fails here: refit
    with `python bench/fit_model_error.py --profile P --write`."""
    me = _shipped(device)
    profile = read_profile(ROOT / me.profile)
    assert profile.device["name"] == device
    per = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a recording under older software than the profile's warns once
        for r in me.fitted_on[kind]:
            pairs = ME.recording_errors(kind, ROOT / r["recording"], profile)
            got = ME.recording_summary(pairs)
            assert got["candidates"] == r["candidates"], r["recording"]
            same = all(got[k] == pytest.approx(r[k], abs=1e-9) for k in ("log_lo", "log_hi"))
            assert same, (f"{kind}'s model no longer gives the error recorded for {r['recording']}: "
                          f"refit with `python bench/fit_model_error.py --profile {me.profile} --write`")
            per.append(pairs)
    assert ME.fit_bins([p for prs in per for p in prs]) == me.bins[kind]
    cover = ME.leave_one_out_coverage(per)
    assert 0.93 <= sum(cover) / len(cover) <= 0.97 and min(cover) >= 0.8, cover


def test_predict_carries_pi95_on_the_recorded_gpu_and_only_there(sim_prof):
    h200 = read_profile(H200)
    d, launch = LAUNCH["pointwise"]
    p = predict.predict("pointwise", d, launch, h200)
    assert p.pi95 is not None
    assert p.pi95[0] < p.ci95[0] <= p.time_us <= p.ci95[1] < p.pi95[1]
    b = _shipped().bin_for("pointwise", p.time_us)
    assert p.pi95[1] / p.time_us >= math.exp(b.log_hi) and p.pi95[0] / p.time_us <= math.exp(b.log_lo)
    assert predict.predict("pointwise", d, launch, sim_prof).pi95 is None  # another GPU: no band
    other = read_profile(H200)
    other.device = dict(other.device, name="NVIDIA H20")  # of the same architecture, never recorded
    assert predict.predict("pointwise", d, launch, other).pi95 is None  # not across GPU models
    # a launch-bound add (a few us): the H100's own band, which leans slow where its launch floor is
    # mispredicted, reaches further above the prediction than the H200's
    small = dict(d, n=1 << 12)
    up = {}
    for name, path in (("h200", H200), ("h100", H100)):
        q = predict.predict("pointwise", small, launch, read_profile(path))
        assert q.time_us < 10 and q.pi95 is not None, name
        up[name] = q.pi95[1] / q.time_us
    assert up["h100"] > up["h200"] + 0.05, up


def test_a_replayed_evaluation_reports_how_often_pi95_holds_the_choice():
    from calib.heuristics import evaluate as E

    me = _shipped()
    rec = me.fitted_on["normalization"][-1]["recording"]  # the latest: every choice of today's is among its candidates
    res = E.evaluate("normalization", backend=f"replay:{ROOT / rec}", profile=read_profile(H200))
    rows = [r for r in res["rows"] if r.get("heuristic_us") and r.get("predicted_pi95")]
    assert len(rows) >= 90
    inside = sum(r["predicted_pi95"][0] <= r["heuristic_us"] <= r["predicted_pi95"][1] for r in rows)
    assert res["prediction"]["all"]["pi95_contains_measured"] == pytest.approx(inside / len(rows))
    assert res["prediction"]["all"]["pi95_contains_measured"] >= 0.85
    assert "model-error interval (pi95)" in E.to_markdown(res)


# -- a bad band file ------------------------------------------------------------------------------

def _doc():
    return json.loads(ME.FILE.read_text())


def _bad(where, change):
    doc = _doc()
    node = doc
    for key in where:
        node = node[key]
    change(node)
    return doc


PW = ("kinds", "pointwise")  # the first GPU model's pointwise entry
BAD = {  # name: (the file's key path to change, the change, what the error says)
    "not the format": ((), lambda d: d.update(format="calib.profile"), "not of format"),
    "a newer version": ((), lambda d: d.update(version=ME.VERSION + 1), "has version"),
    "another coverage": ((), lambda d: d.update(coverage=0.5), "no 95% interval"),
    "no devices": ((), lambda d: d.pop("devices"), "'devices' must be"),
    "a device that is no object": ((), lambda d: d["devices"].append(3), r"devices\[\d+\] must be an object"),
    "one GPU model twice": ((), lambda d: d["devices"].append(d["devices"][0]), "has two bands"),
    "no device": (("devices", 0), lambda d: d.update(device=" "), "'device' is empty"),
    "software not text": (("devices", 0), lambda d: d.update(software={"cupy": 14}), "version string"),
    "a profile that is no path": (("devices", 0), lambda d: d.update(profile=["x"]), "'profile' must be a string"),
    "an unknown kind": (("devices", 0, "kinds"), lambda d: d.update(conv2d=d["pointwise"]), "not a scheduler kind"),
    "no bins": (("devices", 0) + PW, lambda d: d.update(bins=[]), "'bins' is empty"),
    "an upper end on the last bin": (("devices", 0) + PW, lambda d: d["bins"][-1].update(upto_us=1e9), "must be null"),
    "bins out of order": (("devices", 0) + PW, lambda d: d["bins"][1].update(upto_us=1.0), "does not rise"),
    "a band upside down": (("devices", 0) + PW, lambda d: d["bins"][0].update(log_lo=0.5, log_hi=-0.5),
                           "not ordered"),
    "a band of e^50": (("devices", 0) + PW, lambda d: d["bins"][0].update(log_hi=50), "not ordered"),
    "a huge integer": (("devices", 0) + PW, lambda d: d["bins"][0].update(log_hi=10 ** 400), "finite number"),
    "a boolean count": (("devices", 0) + PW, lambda d: d["bins"][0].update(n=True), "'n' must be"),
    "no fitted_on": (("devices", 0) + PW, lambda d: d.pop("fitted_on"), "'fitted_on' must be"),
    "a recording that is no object": (("devices", 0) + PW, lambda d: d["fitted_on"].append("x"),
                                      r"fitted_on\[\d+\] must be an object"),
    "a recording's count negative": (("devices", 0) + PW, lambda d: d["fitted_on"][0].update(candidates=-1),
                                     "'candidates' -1 is negative"),
    "a recording's band missing": (("devices", 0) + PW, lambda d: d["fitted_on"][0].pop("log_hi"), "'log_hi' must be"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_band_file_is_refused_naming_what_is_wrong(name, tmp_path):
    where, change, why = BAD[name]
    p = tmp_path / "model_error.json"
    p.write_text(json.dumps(_bad(where, change)))
    with pytest.raises(ME.ModelErrorError, match=why):
        ME.load(p)


def test_a_kind_given_twice_is_refused_not_read_as_the_last(tmp_path):
    text = ME.FILE.read_text()
    doc = json.loads(text)
    entry = doc["devices"][0]["kinds"]["pointwise"]
    narrowed = json.dumps(dict(entry, bins=[{"upto_us": None, "log_lo": 0, "log_hi": 0, "n": 1}]))
    p = tmp_path / "model_error.json"
    p.write_text(text.replace('"kinds": {', '"kinds": {"pointwise": ' + narrowed + ",", 1))
    with pytest.raises(ME.ModelErrorError, match='key "pointwise" appears twice in one object'):
        ME.load(p)


@pytest.mark.parametrize("content", [b"", b"{", b"[1, 2]", b"\xff\xfe", b"[" * 100000 + b"]" * 100000])
def test_a_file_that_is_no_band_at_all_is_refused(content, tmp_path):
    p = tmp_path / "model_error.json"
    p.write_bytes(content)
    with pytest.raises(ME.ModelErrorError, match="model-error band"):
        ME.load(p)


def test_the_shipped_file_loads_and_round_trips():
    bands = ME.load(ME.FILE)
    doc = ME.to_doc(bands)
    again = [ME.ModelError(me.device, me.software, me.bins, me.fitted_on, me.profile) for me in bands]
    assert ME.to_doc(again) == doc == json.loads(ME.FILE.read_text())
    assert doc["devices"][0]["kinds"]["pointwise"]["bins"][-1]["upto_us"] is None


def test_a_file_of_version_1_one_gpus_band_is_read_forward(tmp_path):
    me = _shipped()
    v1 = {"format": ME.FORMAT, "version": 1, "coverage": ME.COVERAGE, **ME.to_doc([me])["devices"][0]}
    p = tmp_path / "model_error.json"
    p.write_text(json.dumps(v1))
    (got,) = ME.load(p)
    assert got == me


def test_the_review_figure_draws_both_intervals_and_says_how_often_each_held():
    pytest.importorskip("matplotlib")
    from calib.heuristics import evaluate as E
    from calib.heuristics import review

    rec = _shipped().fitted_on["pointwise"][-1]["recording"]
    res = E.evaluate("pointwise", backend=f"replay:{ROOT / rec}", profile=read_profile(H200))
    fig = review.prediction_figure(res)
    ax = fig.axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert any(lb.startswith("pi95") for lb in labels) and any(lb.startswith("ci95") for lb in labels)
    p = res["prediction"]["all"]
    assert f"pi95 holds {p['pi95_contains_measured']:.0%}" in ax.get_title()
    assert f"ci95 holds {p['interval_contains_measured']:.0%}" in ax.get_title()
    # a row without intervals (a choice the predictor could not price) is drawn without them
    res["rows"][0]["predicted_ci95"] = res["rows"][0]["predicted_pi95"] = None
    assert review.prediction_figure(res).axes
