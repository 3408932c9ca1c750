"""The normalization heuristic against the committed H200 recordings (every candidate's device time,
replayed with the recording host's own profile), and the data behind its one correction.

The recordings: A-E, which the model's constants were fitted on (E held out while its structure was
chosen); F and G from a fourth host, H from a fifth (seed 4), none fitted on. Seeds: A and B 0, C and D
1, E and G 2, F 3, H 4. The bars are issue 14's: geomean >= 0.97 of the exhaustive best, worst >= 0.85,
predictor median |error| <= 5% on memory-bound problems and <= 10% over all; every recording meets
all of them (worst 0.862, G). The persistent bias (:data:`N.FEW_ROWS_PERSISTENT_BIAS`) was derived
from all eight; left out one seed at a time, with the bias from the other four, the held-out worst
cases are the same (0.862-0.911)."""

from __future__ import annotations

import collections
import math
from pathlib import Path

import pytest

from calib.heuristics import evaluate as E
from calib.heuristics import normalization as N
from calib.heuristics.predictor import q_of
from calib.profile import load_profile

ROOT = Path(__file__).resolve().parents[1]
R = ROOT / "bench" / "results"
HOST2 = "2026-12-01-h200-heuristics-after/profile-call5-full.json"  # D and E ran with the shipped copy of it
HOST4 = "2026-12-01-h200-heuristics-live5/profile-call3-full.json"  # F, G; H ran with the shipped copy of it
RECORDINGS = {
    "A": ("2026-12-01-h200-heuristics-seed0/heuristics-normalization.json",
          "2026-12-01-h200-heuristics-seed0/profile-call3-full.json"),
    "B": ("2026-12-01-h200-heuristics-after/heuristics-normalization.json", HOST2),
    "C": ("2026-12-01-h200-heuristics-after/seed1/heuristics-normalization.json", HOST2),
    "D": ("2026-12-01-h200-heuristics-live3/seed1/heuristics-normalization.json", HOST2),
    "E": ("2026-12-01-h200-heuristics-live3/seed2/heuristics-normalization.json", HOST2),
    "F": ("2026-12-01-h200-heuristics-live5/seed3/heuristics-normalization.json", HOST4),
    "G": ("2026-12-01-h200-heuristics-live5/seed2/heuristics-normalization.json", HOST4),
    "H": ("2026-12-01-h200-heuristics-live6/seed4/heuristics-normalization.json", HOST4),
}

RECORDED_FAILURES = {"A": 5}


def _profile(name):
    return load_profile(R / RECORDINGS[name][1], device=None, software=None)


@pytest.mark.parametrize("name", sorted(RECORDINGS))
def test_replayed_h200_recording_meets_the_bars(name):
    rec = R / RECORDINGS[name][0]
    res = E.evaluate("normalization", backend=f"replay:{rec}", profile=_profile(name))
    h, b = res["summary"]["heuristic"], res["summary"]["baseline"]
    # A's five vec-1 fp16 problems failed when recorded (a CUDA driver error in one candidate's
    # check ended the problem, call 3); they stay failed problems, not choices that failed
    assert res["evaluated"] == 100 - RECORDED_FAILURES.get(name, 0) and h["choice_failed"] == 0
    assert h["geomean_efficiency"] >= 0.97 and h["worst_efficiency"] >= 0.85, h
    assert h["geomean_efficiency"] > b["geomean_efficiency"]
    assert res["prediction"]["memory_bound"]["median_abs_rel_error"] <= 0.05
    assert res["prediction"]["all"]["median_abs_rel_error"] <= 0.10


def _ratio_errors():
    """Per group (rows per SM, dtype, row length), e = log(measured / predicted) of the best
    persistent over the best multi-pass candidate, one per problem and recording."""
    import json

    groups = collections.defaultdict(list)
    for name, (rec, _) in RECORDINGS.items():
        q = q_of(_profile(name))
        for row in json.loads((R / rec).read_text())["rows"]:
            if not row.get("times_us"):
                continue
            d = N.descriptor(row["descriptor"])
            best = {"persistent": (math.inf, math.inf), "multipass": (math.inf, math.inf)}
            for k in N.space(d):
                t = row["times_us"].get(k.autotune_name)
                p = N.model_us(d, k, q)
                if t is None or not math.isfinite(p):
                    continue
                m, pm = best[k["strategy"]]
                best[k["strategy"]] = (min(m, t), min(pm, p))
            (tp, pp), (tm, pm) = best["persistent"], best["multipass"]
            if math.isfinite(tp) and math.isfinite(tm):
                per_sm = math.ceil(d.rows / 132)
                band = "1" if per_sm <= 1 else "2-4" if per_sm <= 4 else "5-32" if per_sm <= 32 else ">32"
                groups[(band, d.dtype, d.cols >= N.FEW_ROWS_MIN_COLS)].append(math.log(tp / tm) - math.log(pp / pm))
    return groups


def test_the_persistent_bias_is_the_data_s_one_sided_group():
    """The docstring's derivation, recomputed: one group's error is one-sided and its 20th percentile
    is the bias; every other group's 20-80% range contains 0 or stays within 0.06 of it."""
    groups = _ratio_errors()
    few = sorted(groups[("2-4", "float16", True)])
    assert len(few) == 20 and few[0] > 0.05
    assert few[int(0.2 * len(few))] == pytest.approx(N.FEW_ROWS_PERSISTENT_BIAS, abs=0.002)
    for key, v in groups.items():
        if key == ("2-4", "float16", True) or len(v) < 10:
            continue
        v = sorted(v)
        lo, hi = v[int(0.2 * len(v))], v[min(len(v) - 1, int(0.8 * len(v)))]
        assert lo <= 0.06 and hi >= -0.06, (key, lo, hi)


def test_the_bias_applies_only_to_its_group_and_moves_the_strategy():
    """H's fp16 layer norm 354 x 11386 (3 rows per SM): the model ranks a persistent 128-thread block
    first (9.5 us; 11.8 measured), multi-pass at 512 threads ran 8.6 us. With the bias the choice is
    multi-pass; fp32 rows and one row per SM keep the model's order."""
    q = q_of(_profile("H"))
    d = N.descriptor({"op": "layernorm", "rows": 354, "cols": 11386, "dtype": "float16"})
    ranked = sorted(((N.model_us(d, k, q), k) for k in N.space(d)), key=lambda x: x[0])
    assert ranked[0][1]["strategy"] == "persistent"
    assert N.choose_ranked(d, [(t, k) for t, k in ranked], q)["strategy"] == "multipass"
    for other in ({"op": "layernorm", "rows": 354, "cols": 11386, "dtype": "float32"},
                  {"op": "layernorm", "rows": 100, "cols": 11386, "dtype": "float16"},
                  {"op": "layernorm", "rows": 354, "cols": 2048, "dtype": "float16"}):
        assert N.persistent_bias(N.descriptor(other), q) == 0.0
