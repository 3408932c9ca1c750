"""Normalization's residual forest (calib/heuristics/normalization/residual.py): the shipped file is the
fit of the recordings it names, it applies only on top of the corrections it was fitted over and on
their GPU architecture, a bad file is one error naming it, and on the live recordings it was not fitted
on (the H200's of sessions 19 and 22, the H100's of sessions 21, 23 and 24) it chooses better than the
corrected model with the strategy biases did, set by set."""

from __future__ import annotations

import functools
import gzip
import json
import math
import sys
import warnings
from pathlib import Path

import pytest

from calib.heuristics import normalization as N
from calib.heuristics.normalization import corrected as N_corrected
from calib.heuristics.normalization import residual as N_residual
from calib.heuristics.predictor import q_of
from calib.profile import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import fit_normalization_residual as FIT  # noqa: E402
from h200_recordings import FOLDERS, NORM_LIVE, R, read_json  # noqa: E402

ROOT = R.parents[1]
H200 = ROOT / "profiles" / "nvidia-h200.json"
H100 = ROOT / "profiles" / "nvidia-h100-80gb-hbm3.json"


def _profile(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_profile(path, device=None, software=None)


def test_the_shipped_forest_is_the_fit_of_the_recordings_it_names():
    doc = N.load_residual(N.RESIDUAL_FILE)
    assert doc["device"] == "NVIDIA H200" and doc["compute_capability"] == "9.0"
    assert doc["software"] == {"cuda_runtime": "13.2", "cupy": "14.2.0"}
    assert doc["corrections_sha256"] == N_corrected.shipped_sha256()
    assert [tuple(r) for r in doc["recordings"]] == FIT.recordings()
    assert len(doc["recordings"]) == len(FOLDERS) + len(NORM_LIVE) == 48
    assert len(doc["trees"]) == N_residual.TREES and doc["rounds"] == N_residual.ROUNDS == 2
    assert FIT.main(["--check"]) == 0  # refitted: the same trees to the bit


def test_the_forest_applies_on_top_of_the_shipped_corrections_on_their_architecture_only():
    h200, h100 = q_of(_profile(H200)), q_of(_profile(H100))
    shipped = N.residual_forest()
    assert N_corrected.residual_in_force(h200) is shipped is not None
    assert N_corrected.residual_in_force(h100) is shipped  # compute capability 9.0, as the corrections
    with N.use_corrections(None):  # the plain model: nothing to sit on top of
        assert N_corrected.residual_in_force(h200) is None
    other = N.fit_all(N.recorded_samples([(R / FOLDERS["A"][0] / "heuristics-normalization.json.gz",
                                           R / FOLDERS["A"][2])]))
    with N.use_corrections(other):  # another fit of the corrections: the forest learned the shipped one's error
        assert N_corrected.residual_in_force(h200) is None
    stale = dict(shipped, corrections_sha256="0" * 64)
    with N.use_residual(stale):
        assert N_corrected.residual_in_force(h200) is None
    assert N_corrected.residual_in_force(q_of(None)) is None  # the empty profile: no GPU, the plain model


def test_the_forest_moves_the_prediction_and_the_choice_drops_the_biases():
    """Where the forest is in force the heuristic takes the fastest corrected-and-forest prediction;
    without it, the biases decide as before (conftest.before_the_normalization_forest)."""
    q = q_of(_profile(H200))
    d = N.descriptor({"op": "softmax", "rows": 843, "cols": 12011, "dtype": "float32"})
    moved = 0
    for k in N.space(d):
        with N.use_residual(None):
            before = N.model_us(d, k, q)
        after = N.model_us(d, k, q)
        if math.isfinite(before):
            doc = N.residual_forest()
            assert after == pytest.approx(before * math.exp(N_residual.log_factor(doc, d, k, q, before)), rel=1e-12)
            moved += abs(math.log(after / before)) > 0.01
    assert moved > 0
    ranked = sorted(((N.model_us(d, k, q), k) for k in N.space(d)), key=lambda s: s[0])
    assert N.heuristic(d, _profile(H200)) == ranked[0][1]


def test_every_feature_is_finite_and_named():
    q = q_of(_profile(H200))
    for desc in ({"op": "layernorm", "rows": 1, "cols": 2, "dtype": "float16"},
                 {"op": "softmax", "rows": 100000, "cols": 65536, "dtype": "float32"},
                 {"op": "softmax", "rows": 843, "cols": 12011, "dtype": "float32"}):
        d = N.descriptor(desc)
        for k in N.space(d):
            x = N_residual.features(d, k, q, 1.0)
            assert tuple(x) == N_residual.FEATURES and all(math.isfinite(v) for v in x.values()), (desc, k)


def _doc():
    return json.loads(gzip.decompress(N.RESIDUAL_FILE.read_bytes()))


def _write(tmp_path, doc, name="residual.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize(("edit", "message"), [
    ({"format": "calib.heuristics.normalization.corrections"}, "format"), ({"version": 2}, "version"),
    ({"version": True}, "version"), ({"device": ""}, "device"), ({"compute_capability": "sm90"}, "compute_capability"),
    ({"software": {"cuda_runtime": "13.2"}}, "software"), ({"features": ["threads"]}, "features"),
    ({"corrections_sha256": "abc"}, "corrections_sha256"), ({"recordings": []}, "recordings"),
    ({"recordings": [["a.json.gz"]]}, "recordings"), ({"near_log": 0}, "near_log"), ({"rounds": 0}, "rounds"),
    ({"rounds": 2.5}, "rounds"),
    ({"near_log": 1e300}, "near_log"),
    ({"trees": []}, "trees"), ({"trees": [{"log_ratio": 4.0}]}, "log_ratio"),
    ({"trees": [{"feature": "warps", "threshold": 1, "le": {"log_ratio": 0}, "gt": {"log_ratio": 0}}]}, "feature"),
    ({"trees": [{"feature": "threads", "threshold": 10 ** 400, "le": {"log_ratio": 0}, "gt": {"log_ratio": 0}}]},
     "threshold"),
])
def test_a_bad_residual_file_is_an_error_naming_it(tmp_path, edit, message):
    doc = dict(_doc(), **edit)
    with pytest.raises(N.ResidualError, match=message) as err:
        N.load_residual(_write(tmp_path, doc))
    assert "residual.json" in str(err.value)


@pytest.mark.parametrize("text", ["", "{", '{"format": NaN}', '{"version": 1, "version": 1}', "[]", "\x00" * 10,
                                  '{"format": "calib.heuristics.normalization.residual", "version": 1' + "]" * 2])
def test_a_broken_residual_file_is_an_error_naming_it(tmp_path, text):
    p = tmp_path / "broken.json"
    p.write_text(text)
    with pytest.raises(N.ResidualError, match="broken.json"):
        N.load_residual(p)


def test_a_deep_or_missing_forest_file_is_an_error_naming_it(tmp_path):
    node = {"log_ratio": 0.0}
    for _ in range(40):
        node = {"feature": "threads", "threshold": 1, "le": node, "gt": {"log_ratio": 0.0}}
    with pytest.raises(N.ResidualError, match="deep"):
        N.load_residual(_write(tmp_path, dict(_doc(), trees=[node])))
    with pytest.raises(N.ResidualError, match="missing.json"):
        N.load_residual(tmp_path / "missing.json")


# ---------------------------------------------------------------------------------------------------
# judged on the live recordings it is not fitted on

def _sets(group):
    return FIT.judged_sets()[group]


@functools.lru_cache(maxsize=None)
def _efficiencies(path: str, profile: str, forest: bool) -> tuple:
    """Per recorded problem, the measured best over the heuristic's choice's time (0 where the choice
    was not recorded), with the forest in force or not."""
    prof = _profile(Path(profile))
    out = []
    with N.use_residual(N.residual_forest() if forest else None), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for row in read_json(Path(path))["rows"]:
            if not row.get("best_us") or not isinstance(row.get("times_us"), dict):
                continue
            t = row["times_us"].get(N.heuristic(row["descriptor"], prof).autotune_name)
            out.append(row["best_us"] / t if t else 0.0)
    return tuple(out)


def _summary(group, forest):
    sets = [_efficiencies(str(ev), str(prof), forest) for ev, prof in _sets(group)]
    worst = [min(e) for e in sets]
    geo = [math.exp(sum(map(math.log, e)) / len(e)) for e in sets]
    return {"sets": len(sets), "min_geomean": round(min(geo), 4), "mean_worst": round(sum(worst) / len(worst), 4),
            "below_085": sum(w < 0.85 for w in worst), "below_090": sum(w < 0.9 for w in worst)}


@pytest.mark.parametrize(("group", "without", "with_forest"), [
    ("H200 sessions 19, 22", {"sets": 36, "min_geomean": 0.9877, "mean_worst": 0.908, "below_085": 2, "below_090": 14},
     {"sets": 36, "min_geomean": 0.9926, "mean_worst": 0.931, "below_085": 1, "below_090": 4}),
    ("H100 sessions 21, 23", {"sets": 43, "min_geomean": 0.9877, "mean_worst": 0.9147, "below_085": 4, "below_090": 10},
     {"sets": 43, "min_geomean": 0.9914, "mean_worst": 0.935, "below_085": 1, "below_090": 4}),
    ("H100 session 24", {"sets": 16, "min_geomean": 0.9887, "mean_worst": 0.9207, "below_085": 1, "below_090": 2},
     {"sets": 16, "min_geomean": 0.9897, "mean_worst": 0.9292, "below_085": 0, "below_090": 1}),
    # the first live run of the shipped forest (seed 194's fp32 layer norm 1216 x 3832 fell to 0.840 with it,
    # 0.935 without; 193, 199 and 201 rose from 0.879-0.902 to 0.944-0.955)
    ("H100 session 25", {"sets": 16, "min_geomean": 0.987, "mean_worst": 0.9078, "below_085": 2, "below_090": 7},
     {"sets": 16, "min_geomean": 0.992, "mean_worst": 0.9192, "below_085": 3, "below_090": 4}),
])
def test_on_sets_it_was_not_fitted_on_the_forest_chooses_better(group, without, with_forest):
    """Replayed with the profile each live run read: every set keeps its geomean at or above 0.97, and
    the worst cases rise on the mean (the H100's with the H200's forest, across compute capability 9.0),
    though not set by set: session 25 has one more set below 0.85 with the forest than without."""
    assert _summary(group, forest=False) == without
    assert _summary(group, forest=True) == with_forest
