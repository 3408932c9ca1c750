"""The split-K heuristic against the committed H200 recordings (every split's device time,
replayed with the recording host's own profile).

The recordings: A-E, the five the model's constants were fitted on (A-D; E held out), F and G from
another machine (seed 3 new problems, seed 2 E's), H a fifth machine on seed 4 (unseen when it ran),
I and J a sixth machine on seeds 6 and 7 (2026-12-02, unseen when they ran, replayed with the
profile the heuristics read there), K and L a seventh machine on seeds 5 and 8 (2026-12-02 session 3
call 3, unseen when they ran, replayed with the profile shipped then,
2026-12-02-h200-suites-session3/profile-full.json); nine problem sets in all. The bars are issue 14's: geomean
>= 0.97 of the exhaustive best, worst >= 0.85, predictor median |error| <= 5% on memory-bound
problems and <= 10% overall.

Not every recording meets every bar, and a bar a recording does not meet is not asserted:

- worst >= 0.85 holds for C, D, E, G and K only (K 1.000, its shapes in the correction's fit): A and
  B 0.828 / 0.840, F 0.712, H 0.760, I 0.820, J 0.711, L 0.735. Each problem below 0.85 is an fp32
  one where the split-1 prediction (cuBLAS's own FP32 GEMM) was more than 5% off its measured time
  and the choice went the wrong way: split 1 ran 1.09-1.81x its prediction where a split won
  (16x720x3584, 320x1424x29440, 320x560x2304, 64x1056x19200, 1168x288x3328, 16x5216x5632,
  64x544x42496, 16x1264x9216; L's 144x2080x20736 and 128x576x15104, 1.28x and 1.88x). Those
  recordings assert that instead
  (:func:`test_the_problems_below_the_worst_bar_are_fp32_split1_mispredictions`), so that a change
  which fails anywhere else fails here. I's worst was 0.725 (48x496x22016, split 32 predicted 0.91x
  split 1, ran 1.38x it) before split 1 was favoured by splitk.SPLIT_MARGIN.
- memory-bound median <= 5% holds for all twelve (2.9-4.4%), with both split-1 corrections in the
  sample: the fp32 one (splitk.SPLIT1_FILE: the evaluation's predictor.predict_model carries the
  profile's device name) is fitted on the traced shapes of all twelve, the fp16 one
  (splitk.FP16_SPLIT1_FILE) on the recorded times of these and 17 more. Without the fp16 one only A, F,
  H, I, J, K and L met it (3.6-4.8%; B, C, D, E, G 5.2-5.6%).
  :func:`test_split1_correction_left_out_one_seed_at_a_time` and
  tests/test_heuristics_splitk_fp16.py check each correction held out.
"""

from __future__ import annotations

import json
import sys
import statistics
from pathlib import Path

import pytest

from calib.heuristics import evaluate as E
from calib.heuristics import predictor as P
from calib.heuristics import splitk as SK
from calib.heuristics.predictor import q_of
from calib.profile import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from h200_recordings import FITTED, R, SEEDS, read_json, recordings  # noqa: E402

ROOT = R.parents[1]

RECORDINGS = recordings("matmul_splitk", names=FITTED)
# the recordings whose worst case is at least 0.85 (the one bar not every recording meets)
MEETS_WORST = set("CDEGK")
_results: dict = {}


def _replay(name):
    if name not in _results:
        rec, prof = (R / p for p in RECORDINGS[name])
        profile = load_profile(prof, device=None, software=None)
        _results[name] = (E.evaluate("matmul_splitk", backend=f"replay:{rec}", profile=profile), profile)
    return _results[name]


@pytest.mark.parametrize("name", sorted(RECORDINGS))
def test_replayed_h200_recording_meets_the_bars(name):
    res, _ = _replay(name)
    h, b = res["summary"]["heuristic"], res["summary"]["baseline"]
    assert res["evaluated"] == 100 and h["choice_failed"] == 0
    assert h["geomean_efficiency"] >= 0.97, h
    assert h["geomean_efficiency"] > b["geomean_efficiency"]
    assert res["prediction"]["all"]["median_abs_rel_error"] <= 0.10
    assert res["prediction"]["memory_bound"]["median_abs_rel_error"] <= 0.05
    assert (h["worst_efficiency"] >= 0.85) == (name in MEETS_WORST), h


def assert_misses_are_fp32_mispredictions(res, q) -> None:
    """Every problem below 0.85 is fp32, and the model missed the time of the candidate it chose (too
    low) or of the one that won (too high) by more than 5%: the direction that made the choice wrong."""
    for r in res["rows"]:
        if not r.get("heuristic_us") or r["best_us"] / r["heuristic_us"] >= 0.85:
            continue
        d = SK.descriptor(r["descriptor"])
        assert d.dtype == "float32", r["descriptor"]
        chosen, best = r["heuristic"], r["best"]
        chosen_over = r["times_us"][f"split={chosen['split']}"] / SK.model_us(d, chosen, q)
        best_over = r["times_us"][f"split={best['split']}"] / SK.model_us(d, best, q)
        assert chosen_over > 1.05 or best_over < 0.95, (r["descriptor"], chosen, best, chosen_over, best_over)


@pytest.mark.parametrize("name", sorted(set(RECORDINGS) - MEETS_WORST))
def test_the_problems_below_the_worst_bar_are_fp32_mispredictions(name):
    """Where the worst bar is missed, it is missed only on fp32 problems whose chosen or winning
    candidate the model missed by more than 5% (split 1's, cuBLAS's FP32 GEMM, before the splits'
    forest of 2026-12-06; since then, where those replays lack cuBLASLt's answers, a split's too)."""
    res, profile = _replay(name)
    assert [r for r in res["rows"] if r.get("heuristic_us") and r["best_us"] / r["heuristic_us"] < 0.85]
    assert_misses_are_fp32_mispredictions(res, q_of(profile))


@pytest.mark.parametrize("name", sorted(RECORDINGS))
def test_fp16_is_never_split_and_never_wins_split(name):
    """CuPy's batched path runs fp16 in FP32 on the CUDA cores: no fp16 problem recorded was faster
    split, and the heuristic splits none."""
    res, _ = _replay(name)
    half = [r for r in res["rows"] if r["descriptor"]["dtype"] == "float16"]
    assert len(half) > 30
    assert all(r["best"] == {"split": 1} and r["heuristic"] == {"split": 1} for r in half)


@pytest.mark.parametrize(("name", "mnk", "was"), [("C", (4688, 48, 17152), 0.65), ("E", (432, 48, 23552), 0.70)])
def test_outputs_of_48_columns_are_not_held_to_32_wide_simt_tiles(name, mnk, was):
    """Only outputs of up to 48 rows take 32-row SIMT tiles; 48 columns ran like a 64-wide tile.
    With 32-wide column tiles too, these ran at ``was`` of their prediction."""
    res, profile = _replay(name)
    (row,) = [r for r in res["rows"] if (r["descriptor"]["m"], r["descriptor"]["n"], r["descriptor"]["k"]) == mnk
              and r["descriptor"]["dtype"] == "float32"]
    # the plain model's tiles (the traced-time correction lowers this one 18%: splitk.SPLIT1_FILE)
    predicted = SK.gemm_us(q_of(profile), *mnk, 4, 4, "simt")
    assert abs(row["times_us"]["split=1"] / predicted - 1) < 0.10


KERNELS = R / "2026-12-02-h200-splitk-kernels" / "kernels.json.gz"


def _fp32_split1(name):
    """(shape, recorded split-1 us) of a recording's fp32 problems, from the raw rows."""
    rows = read_json(R / RECORDINGS[name][0])["rows"]
    return [((r["descriptor"]["m"], r["descriptor"]["n"], r["descriptor"]["k"]), r["times_us"]["split=1"])
            for r in rows if r["descriptor"]["dtype"] == "float32"]


def test_split1_correction_file_is_the_fit_of_the_traced_kernels():
    doc = SK.load_split1()
    q = q_of(load_profile(ROOT / doc["profile"], device=None, software=None))
    assert doc["device"] == q.device_name == "NVIDIA H200"
    assert SK.fit_split1_tree(read_json(ROOT / doc["kernels"]), q) == doc["tree"]


@pytest.mark.parametrize(("edit", "message"), [
    ({"version": SK.SPLIT1_VERSION + 1}, "version"), ({"version": 0}, "version"), ({"software": {}}, "software"),
    ({"compute_capability": None}, "compute_capability"), ({"compute_capability": "sm_90"}, "compute_capability"),
    ({"format": "x"}, "format"), ({"device": ""}, "device"),
    ({"features": ["log2_m"]}, "features"), ({"tree": {"log_ratio": float("nan")}}, "log_ratio"),
    ({"tree": {"feature": "log2_q", "threshold": 1, "le": {"log_ratio": 0}, "gt": {"log_ratio": 0}}}, "feature"),
    ({"tree": {"feature": "log2_m", "threshold": 1, "le": {"log_ratio": 0}}}, "split node"),
])
def test_split1_correction_file_is_checked_field_by_field(tmp_path, edit, message):
    doc = dict(json.loads(SK.SPLIT1_FILE.read_text()), **edit)
    p = tmp_path / "c.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(SK.HeuristicError, match=message):
        SK.load_split1(p)


def test_split1_correction_only_lowers_and_only_on_its_gpus_architecture():
    _, profile = _replay("L")
    q = q_of(profile)
    factors = [SK.split1_log_factor(q, m, n, k) for (m, n, k), _ in _fp32_split1("L")]
    assert all(f <= 0 for f in factors) and min(factors) < -0.1
    h200 = SK.split1_log_factor(q, 16, 1264, 9216)
    q.device_name = "NVIDIA H100 80GB HBM3"  # compute capability 9.0, as the H200
    assert SK.split1_log_factor(q, 16, 1264, 9216) == h200
    q.device_arch = "8.0"
    assert SK.split1_log_factor(q, 16, 1264, 9216) == 0.0


def test_split1_correction_left_out_one_seed_at_a_time(monkeypatch, before_the_fp32_forest):
    """Fitted without a seed's shapes, the correction changes no choice's efficiency (every
    recording's choices as good as the plain model's) and lowers the fp32 split-1 median |error| on
    at least 10 of the 12 recordings (it did on 10: H and L rose)."""
    kernels = read_json(KERNELS)
    doc = SK.load_split1()
    qt = q_of(load_profile(ROOT / doc["profile"], device=None, software=None))
    lowered = 0
    for name in sorted(RECORDINGS):
        _, profile = _replay(name)
        q = q_of(profile)
        shapes = {s for n in RECORDINGS if SEEDS[n] == SEEDS[name] for s, _ in _fp32_split1(n)}
        held_out = dict(doc, tree=SK.fit_split1_tree(kernels, qt, exclude=shapes))
        rows = read_json(R / RECORDINGS[name][0])["rows"]
        errors, effs = {}, {}
        for which, d in (("plain", None), ("held_out", held_out)):
            monkeypatch.setitem(SK._split1, "doc", d)
            errors[which] = statistics.median(
                abs(SK.model_us(SK.SplitKDescriptor(*s, "float32"), {"split": 1}, q) / t - 1)
                for s, t in _fp32_split1(name))
            effs[which] = [r["best_us"] / r["times_us"][SK.heuristic(r["descriptor"], profile).autotune_name]
                           for r in rows]
        assert effs["held_out"] == effs["plain"], name
        lowered += errors["held_out"] < errors["plain"]
    assert lowered >= 10


ALL = recordings("matmul_splitk", names=FITTED + "M")  # M (seed 9) too: the margin was chosen on it as well


def _rows_and_profile(name):
    rec, prof = (R / p for p in ALL[name])
    return read_json(rec)["rows"], load_profile(prof, device=None, software=None)


def _fastest_predicted(d, profile):
    d = SK.descriptor(d)
    return P.rank(SK.model_us, d, SK.space(d), profile)[0][1]


def test_the_split_margin_only_turns_choices_to_split_1_and_only_where_split_1_was_faster(before_the_fp32_forest):
    """On all thirteen recordings, every choice the margin changes (against the fastest prediction)
    becomes split 1 and runs at least as fast; C and D's 48-row outputs, where a split won by 9-24%,
    are still split, and I's 48x496x22016 (split 32, 0.725 of the best) is not."""
    changed, split_48 = {}, {}
    for name in sorted(ALL):
        rows, profile = _rows_and_profile(name)
        for r in rows:
            d, t = r["descriptor"], r["times_us"]
            h, fastest = SK.heuristic(d, profile), _fastest_predicted(d, profile)
            if h != fastest:
                assert h == {"split": 1}, d
                assert t["split=1"] <= t[fastest.autotune_name], (name, d)
                changed[name, (d["m"], d["n"], d["k"])] = t["split=1"] / t[fastest.autotune_name]
            if h["split"] > 1:
                split_48[name, (d["m"], d["n"], d["k"])] = h["split"]
    assert ("I", (48, 496, 22016)) in changed
    assert {("C", (48, 1072, 26624)), ("D", (48, 1072, 26624)), ("C", (48, 2240, 6144))} <= set(split_48)


SEEN = recordings("matmul_splitk", names=FITTED + "MNOP")  # seeds 0-12: every recording there is
MARGINS = [round(0.70 + 0.01 * i, 2) for i in range(31)]  # 0.70-1.00; 1.00 is no margin


def _predicted(rows, profile):
    """Per row: (fastest predicted time, its split's name, split 1's predicted time, the row)."""
    out = []
    for r in rows:
        d = SK.descriptor(r["descriptor"])
        ranked = P.rank(SK.model_us, d, SK.space(d), profile)
        out.append((ranked[0][0], ranked[0][1].autotune_name, next(t for t, k in ranked if k["split"] == 1), r))
    return out


def _efficiencies(predicted, margin):
    """The heuristic's rule (splitk.heuristic) at ``margin``, from precomputed predictions."""
    return [r["best_us"] / r["times_us"][name if name != "split=1" and t_best < margin * t1 else "split=1"]
            for t_best, name, t1, r in predicted]


def test_the_split_margin_left_out_one_seed_at_a_time(monkeypatch, before_the_fp32_forest):
    """Leave one seed out over seeds 0-12 (A-P), the margin chosen per fold: with the split-1
    correction fitted without the held-out seed's shapes (as when that seed is unseen), the margin is
    the one that keeps the other seeds' recordings' mean worst case highest (the middle of the tie;
    MARGINS). Judged on the held-out seed, no problem runs slower than with the fastest prediction,
    I's 48x496x22016 and K's 48x6720x512 (0.725 and 0.892 of the best before) run faster, and the
    shipped SPLIT_MARGIN is in every fold's tie (the folds chose 0.81-0.90; 2026-12-02)."""
    kernels = read_json(KERNELS)
    doc = SK.load_split1()
    qt = q_of(load_profile(ROOT / doc["profile"], device=None, software=None))
    loaded = {n: (read_json(R / rec)["rows"], load_profile(R / prof, device=None, software=None))
              for n, (rec, prof) in SEEN.items()}
    better, chosen = set(), {}
    for seed in sorted(set(SEEDS[n] for n in SEEN)):
        held = [n for n in SEEN if SEEDS[n] == seed]
        shapes = {(r["descriptor"]["m"], r["descriptor"]["n"], r["descriptor"]["k"])
                  for n in held for r in loaded[n][0] if r["descriptor"]["dtype"] == "float32"}
        monkeypatch.setitem(SK._split1, "doc", dict(doc, tree=SK.fit_split1_tree(kernels, qt, exclude=shapes)))
        predicted = {n: _predicted(*loaded[n]) for n in SEEN}
        score = {m: statistics.mean(min(_efficiencies(predicted[n], m)) for n in SEEN if n not in held)
                 for m in MARGINS}
        tied = [m for m in MARGINS if score[m] >= max(score.values()) - 1e-12]
        chosen[seed] = tied[len(tied) // 2]
        assert tied[0] <= SK.margins.SPLIT_MARGIN <= tied[-1], (seed, tied)
        for name in held:
            with_margin, without = _efficiencies(predicted[name], chosen[seed]), _efficiencies(predicted[name], 1.0)
            for (_, _, _, r), a, b in zip(predicted[name], with_margin, without):
                assert a >= b, (name, r["descriptor"])
                if a > b:
                    better.add((name, r["descriptor"]["m"], r["descriptor"]["n"], r["descriptor"]["k"]))
    assert {("I", 48, 496, 22016), ("K", 48, 6720, 512)} <= better, better
    assert all(m < 1.0 for m in chosen.values()), chosen
