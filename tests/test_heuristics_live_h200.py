"""The live check of session 3's final models on the H200 (recording M: seed 9, a problem set
nothing was fitted on or looked at before it ran, 2026-12-02, a ninth host, the profile then
shipped), replayed: the heuristics' choices and predictions on its recorded times are what the
live run reported, against issue 14's bars where that run met them.

Met live: pointwise and normalization every bar (normalization's worst 0.852); split-K the geomean
and the overall predictor error. Not met: split-K's worst case (0.685) and memory-bound median
(5.4%), so those are not asserted; its problems below 0.85 are pinned to what the other recordings
show (fp32, cuBLAS's split 1 chosen and slower than a split).

Recording N (seed 10, session 4's models: split-K's margin 44f86bf, normalization's pair bias and
A-M refit 50fae4a; 2026-12-02, the same shipped profile) met every bar of issue 14 live, split-K's
worst case (0.921) and memory-bound median (4.7%) included; its replay is pinned the same way.
Recording O (seed 11, 2026-12-02, split-K asking cuBLASLt which kernel split 1 runs): pointwise and
normalization met every bar again, split-K its geomean and overall error; it missed the worst case
(0.796: fp32 176x1568x6400, cuBLAS's split 1 against split 16) and the memory-bound median (5.2%).
Replayed here without cuBLASLt (no GPU): the same choices, as the probe of O's shapes given as the
oracle also gives (bench/results/2026-12-02-h200-heuristics-s4c4/cublaslt-s4c4.json.gz).
Recording P (seed 12, the same code and profile, a 13th host): pointwise every bar; normalization
its geomean and predictor but not its worst case (0.801: fp16 layernorm 23143x377, persistent at
128 threads per row against 32); split-K its geomean, worst case (0.898) and overall error, not its
memory-bound median (6.6% live with cuBLASLt's kernels; 5.4% replayed here without them).
Recordings Q and R (seeds 13 and 14, session 5's models, the refreshed shipped profile, a 15th host):
Q met every bar of issue 14 live for all three kinds (split-K's worst 0.901 with cuBLASLt's kernels;
replayed here without them 0.827, a cuBLAS fp32 split 1 again); R met pointwise's bars, both kinds'
geomeans and overall errors, and missed normalization's worst case (0.800: fp32 softmax 960 x 28805,
multi-pass at 256 threads a row against 1024), split-K's worst case (0.438: fp32 16 x 80 x 768, split 1
ran 28.5 us where 9.7 was predicted) and split-K's memory-bound median (5.7%).
Recording S (seed 15, session 5's final models, a 16th host): pointwise and normalization met every
bar live; split-K its geomean and overall error, not its worst case (0.788: fp32 64 x 3360 x 32512,
split 8 against 32) or its memory-bound median (5.1%). Its split-K is not replayed here: without
cuBLASLt's answers (no probe of its shapes) the replay's geomean is 0.956, another model than the one
that ran live (0.995).
Recordings T, U and V (seeds 16-18, session 6 call 2's models: split-K's batched choice for 16-row
outputs and its margin, the serial chain; the shipped profile, a 17th host): pointwise met every bar
live on all three, normalization on U and V (T's worst 0.716: fp32 softmax 3976 x 14405, multi-pass at
512 threads against persistent at 1024), split-K its geomean everywhere and its worst case on T and U
(0.858, 0.851; V 0.671: fp32 80 x 544 x 4096, split 32 against 16), its memory-bound median on T and U
(3.7, 4.9%; V 5.3%). Their split-K replays with every probe in tests/test_heuristics_splitk_serial.py.
Recordings W, X, Y and Z (seeds 19-22, session 6's final models, unseen when they ran, the shipped profile,
an 18th host, 2026-12-02): split-K met every bar on all four (worst 0.867-0.943, memory-bound median
3.7-4.8%; replayed with the probes in tests/test_heuristics_splitk_serial.py); pointwise on X, Y, Z (W's
worst 0.843: fp16 exp of 6.8M elements, 8-byte vectors against 16); normalization on Y (W 0.801: fp16
layer norm 7 x 14571, persistent at 256 threads against 1024; X 0.814 and Z 0.797: fp16 layer norm of
odd rows of 26-29k elements, 1564 and 770 rows, multi-pass at 512 threads against 1024).
Seeds 26-28 (bench/results/2026-12-03-h200-heuristics-s10/: normalization's loop-band corrections fitted
on all 29 recordings, the shipped profile, unseen when they ran; kept out of h200_recordings.FOLDERS, so
that nothing is fitted on them): pointwise and normalization met every bar live on all three (worst
0.924-0.937 and 0.875-0.938), split-K its geomean and worst case (0.877-0.951) and overall error, not
its memory-bound median (5.4, 6.0, 5.4%). Seeds 29-31 (s10c2/, the driver's register counts deciding
which persistent blocks launch): no choice failed; pointwise met every bar, normalization on 30 and 31
(29's worst 0.815: fp32 softmax 223 x 23576, persistent v4 x 32 at 1024 threads against multi-pass,
T's pattern; with the rule instead of the counts 0.817), split-K its geomean everywhere and its worst
on 29 and 30, never its memory-bound median. Seeds 32-37 (s11/, s11c2/: split-K's fp16 split-1
correction and the learned predictor's wider bands, unseen when they ran): pointwise and normalization
met every bar live on all six (normalization's worst 0.854-0.924), split-K its geomean everywhere, its
worst case on all but 37 (0.813: fp32 16 x 816 x 6656, cuBLAS's split 1 ran 1.25x its prediction
against split 16) and its memory-bound median on 32, 33, 34 and 37 (3.5, 4.6, 4.3, 4.4%; 35 5.5%, its
fp32 rows 10.9%; 36 5.7%)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from calib.heuristics import evaluate as E
from calib.heuristics import normalization as N
from calib.heuristics.knobs import Knobs
from calib.heuristics.predictor import q_of
from calib.profile import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from h200_recordings import R, assert_meets_every_bar, recordings  # noqa: E402
from test_heuristics_splitk_h200 import assert_misses_are_fp32_mispredictions  # noqa: E402


S10 = "2026-12-03-h200-heuristics-s10"
SHIPPED = R.parents[1] / "profiles" / "nvidia-h200.json"
UNSEEN = {str(seed): (f"{S10}/seed{seed}", SHIPPED) for seed in (26, 27, 28)}
UNSEEN.update({str(seed): (f"{S10}c2/seed{seed}", SHIPPED) for seed in (29, 30, 31)})
# session 11: split-K's fp16 split-1 correction and the learned predictor's bands, live
S11 = "2026-12-03-h200-heuristics-s11"
UNSEEN.update({str(seed): (f"{S11}/heuristics-seed{seed}", SHIPPED) for seed in (32, 33, 34)})
UNSEEN.update({str(seed): (f"{S11}c2/heuristics-seed{seed}", SHIPPED) for seed in (35, 36, 37)})
# session 12 call 1 (2026-12-04): the same models (commit f13985f), a new host
S12 = "2026-12-04-h200-heuristics-s12"
UNSEEN.update({str(seed): (f"{S12}/heuristics-seed{seed}", SHIPPED) for seed in (38, 39, 40, 41)})
# session 12 call 3: split-K's forests and margins (18a5259); their split-K rows since fitted on
# (h200_recordings.TRAINING), their pointwise and normalization rows not
UNSEEN.update({str(seed): (f"{S12}c3/heuristics-seed{seed}", SHIPPED) for seed in (42, 43, 44)})


def _replay(kind, name="M"):
    if name in UNSEEN:
        folder, prof = UNSEEN[name]
        rec = R / folder / f"heuristics-{kind}.json.gz"
    else:
        rec, prof = (R / p for p in recordings(kind, names=name)[name])
    return E.evaluate(kind, backend=f"replay:{rec}", profile=load_profile(prof, device=None, software=None))


@pytest.mark.parametrize("kind, name", [("pointwise", "M"), ("pointwise", "O"), ("pointwise", "P"),
                                        ("pointwise", "Q"), ("pointwise", "R"), ("pointwise", "S"),
                                        ("pointwise", "T"), ("pointwise", "U"), ("pointwise", "V"),
                                        ("pointwise", "X"), ("pointwise", "Y"), ("pointwise", "Z"),
                                        ("normalization", "M"), ("normalization", "O"), ("normalization", "Q"),
                                        ("normalization", "S"), ("normalization", "U"), ("normalization", "V"),
                                        ("normalization", "Y")]
                         + [("pointwise", seed) for seed in UNSEEN]
                         + [("normalization", seed) for seed in UNSEEN if seed != "29"])
def test_the_live_check_met_every_bar(kind, name):
    assert_meets_every_bar(_replay(kind, name))


@pytest.mark.parametrize("name", ["M", "O", "Q", "R"])  # not S: see the module docstring
def test_the_live_check_of_splitk_meets_the_geomean_and_its_misses_are_cublas_fp32(name):
    res = _replay("matmul_splitk", name)
    h, b = res["summary"]["heuristic"], res["summary"]["baseline"]
    assert res["evaluated"] == 100 and h["choice_failed"] == 0
    assert h["geomean_efficiency"] >= 0.97 and h["geomean_efficiency"] > b["geomean_efficiency"]
    assert res["prediction"]["all"]["median_abs_rel_error"] <= 0.10
    misses = [r for r in res["rows"] if r.get("heuristic_us") and r["best_us"] / r["heuristic_us"] < 0.85]
    assert misses, "the live run had problems below 0.85; a replay without them is another model"
    prof = R / recordings("matmul_splitk", names=name)[name][1]
    assert_misses_are_fp32_mispredictions(res, q_of(load_profile(prof, device=None, software=None)))


@pytest.mark.parametrize("kind", ["pointwise", "normalization", "matmul_splitk"])
def test_the_live_check_of_seed_10_met_every_bar(kind):
    res = _replay(kind, "N")
    h, b = res["summary"]["heuristic"], res["summary"]["baseline"]
    assert res["evaluated"] == 100 and h["choice_failed"] == 0
    assert h["geomean_efficiency"] >= 0.97 and h["worst_efficiency"] >= 0.85, h
    assert h["geomean_efficiency"] > b["geomean_efficiency"]
    assert res["prediction"]["memory_bound"]["median_abs_rel_error"] <= 0.05
    assert res["prediction"]["all"]["median_abs_rel_error"] <= 0.10


def test_the_live_check_of_seed_12_meets_what_it_met():
    """P: normalization's geomean and predictor held live, its worst case not (0.801: fp16 layer norm
    23143 x 377 persistent at 128 threads a row, 24.6 us, where 32 ran 19.7); replayed with the block
    pace of 23a05dc (a p-norm of the dispatch floor and the per-thread cost, p chosen over A-M; P held
    out gives the same) that problem took 32 threads and the worst case was 0.857; with the multi-pass
    loop bands of the corrections (version 3, fitted on every recording) it takes 64 threads (20.6 us,
    0.956) and the worst case is 0.935. Split-K's geomean, worst case and overall error held."""
    norm = _replay("normalization", "P")
    h = norm["summary"]["heuristic"]
    assert h["geomean_efficiency"] >= 0.97 and norm["prediction"]["memory_bound"]["median_abs_rel_error"] <= 0.05
    assert h["worst_efficiency"] >= 0.85, h
    (row,) = [r for r in norm["rows"] if r["descriptor"] == {"op": "layernorm", "rows": 23143, "cols": 377,
                                                              "dtype": "float16"}]
    assert row["best_us"] / row["heuristic_us"] > 0.95 and row["heuristic"]["threads"] <= 64, row
    sk = _replay("matmul_splitk", "P")
    h = sk["summary"]["heuristic"]
    assert h["geomean_efficiency"] >= 0.97 and h["worst_efficiency"] >= 0.85, h
    assert sk["prediction"]["all"]["median_abs_rel_error"] <= 0.10


R_LONG_SOFTMAX = {"op": "softmax", "rows": 960, "cols": 28805, "dtype": "float32"}


@pytest.mark.usefixtures("before_the_normalization_forest")
def test_the_live_check_of_seed_14_normalization_missed_on_a_multipass_thread_count_now_replays_at_the_bar(
        monkeypatch):
    """R: normalization's geomean and predictor held live, its worst case not (0.800: fp32 softmax
    960 x 28805 multi-pass at 256 threads, 146.9 us, where 1024 ran 117.5). Since the multi-pass
    stagger (normalization.STAGGER_WAVES, chosen with R seen: A-M alone barely tell 1 from 2) the
    replay meets every bar (worst 0.914) and that problem takes 1024 threads; without the stagger it
    takes 256 again, with the corrections' classes as they were then (one per compiled kernel); with
    the loop bands of version 3 (the long multi-pass loops' own factors: 28805 / 4 / 256 = 29 vectors a
    thread and pass against 8 at 1024) it takes 1024 with or without the stagger. Fitted with R seen,
    so this is not a held-out result."""
    from calib.heuristics import normalization as N
    from calib.heuristics.normalization import classes as N_classes
    from calib.heuristics.normalization import model as N_model

    res = _replay("normalization", "R")
    h = res["summary"]["heuristic"]
    assert res["evaluated"] == 100 and h["choice_failed"] == 0
    assert h["geomean_efficiency"] >= 0.97 and h["worst_efficiency"] >= 0.85, h
    assert res["prediction"]["memory_bound"]["median_abs_rel_error"] <= 0.05
    row = next(r for r in res["rows"] if r["descriptor"] == R_LONG_SOFTMAX)
    assert row["heuristic"]["strategy"] == "multipass" and row["heuristic"]["threads"] == 1024, row["heuristic"]
    prof = load_profile(R / recordings("normalization", names="R")["R"][1], device=None, software=None)
    monkeypatch.setattr(N_model, "STAGGER_WAVES", 0.0)
    assert N.heuristic(R_LONG_SOFTMAX, prof)["threads"] == 1024
    monkeypatch.setattr(N_classes, "loop_log2", lambda d, k: None)
    pairs = [(R / r, R / p) for _, (r, p) in sorted(recordings("normalization", names="ABCDEFGHIJKLMQR").items())]
    with N.use_corrections(N.fit_all(N.recorded_samples(pairs))):
        old = N.heuristic(R_LONG_SOFTMAX, prof)
    assert old["strategy"] == "multipass" and old["threads"] == 256, dict(old)


@pytest.mark.usefixtures("before_the_normalization_forest")
def test_seed_29_normalization_missed_only_where_the_model_ranked_persistent_ahead_on_two_fp32_rows_per_sm():
    """Seed 29's one problem below 0.85 live is T's 219 x 26328 pattern: fp32 softmax of about two rows per
    SM and 20k+ columns, persistent chosen, multi-pass faster; the model's times the wrong way round. The
    pooled few-rows bias (0.108, as in 2026-12-07's version 5 of the corrections) kept that choice; fp32's
    own (0.145, version 6) takes multi-pass, the measured best, and the worst case to 0.953."""
    with N.use_corrections(dataclasses.replace(N.corrections(), persistent_bias_by_dtype=None)):
        res = _replay("normalization", "29")
    h = res["summary"]["heuristic"]
    assert res["evaluated"] == 100 and h["choice_failed"] == 0 and h["geomean_efficiency"] >= 0.97
    assert res["prediction"]["memory_bound"]["median_abs_rel_error"] <= 0.05
    q = q_of(load_profile(SHIPPED, device=None, software=None))
    low = [r for r in res["rows"] if r["best_us"] / r["heuristic_us"] < 0.85]
    assert len(low) == 1
    d, chosen, best = N.descriptor(low[0]["descriptor"]), Knobs(low[0]["heuristic"]), Knobs(low[0]["best"])
    assert d.dtype == "float32" and d.op == "softmax" and 1 < d.rows / N.P.sm_count(q) <= 2 and d.cols > 20000
    assert (chosen["strategy"], best["strategy"]) == ("persistent", "multipass")
    assert N.model_us(d, chosen, q) < N.model_us(d, best, q)
    now = _replay("normalization", "29")
    row = next(r for r in now["rows"] if r["descriptor"] == low[0]["descriptor"])
    assert row["heuristic"] == low[0]["best"] and row["heuristic_us"] == row["best_us"]
    assert now["summary"]["heuristic"]["worst_efficiency"] == pytest.approx(0.953, abs=5e-4)
