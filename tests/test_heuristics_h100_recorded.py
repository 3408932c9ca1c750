"""The H100 recordings of 2026-12-07 (bench/results/2026-12-07-h100-own-profile/), replayed on the
CPU with the profile that H100 measured of itself (the quick suite) just before.

No constant of calib's models was fitted on an H100. When these ran, the split-K forests and the
normalization corrections, fitted on H200 recordings, applied to the H200 alone; since 2026-12-07 they
apply to every GPU of its architecture (compute capability 9.0), the H100 too. These pin that the CPU
replay under the rules the recordings ran with gives the live numbers exactly (so a later change to a
model shows what it does on a GPU it was not tuned on), what the corrections change on them, and which
of issue 14's bars the heuristics met there; the folder's README says where they miss."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from calib.heuristics import evaluate as E
from calib.profile import load_profile

# The model as these runs chose with it: the corrected model and the strategy biases, without the residual forest
# (2026-12-07, session 24), which tests/test_heuristics_normalization_residual.py judges on these recordings.
pytestmark = pytest.mark.usefixtures("before_the_normalization_forest")

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "bench" / "results" / "2026-12-07-h100-own-profile"
KINDS = ("pointwise", "normalization", "matmul_splitk")


def _profile(as_ran: bool = True):
    """The H100's profile; ``as_ran``: without its compute capability, so that no H200 correction
    applies, as none did when the recordings were made."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        profile = load_profile(FOLDER / "profile-h100-quick.json", device=None, software=None)
    if as_ran:
        profile.device = {k: v for k, v in profile.device.items() if k != "compute_capability"}
    return profile


def _replayed(seed: int, kind: str, as_ran: bool = True):
    path = FOLDER / f"heuristics-seed{seed}" / f"heuristics-{kind}.json.gz"
    import gzip

    live = json.loads(gzip.decompress(path.read_bytes()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = E.evaluate(kind, backend=f"replay:{path}", profile=_profile(as_ran))
    return live, res


def _key(row) -> str:
    return json.dumps(row["descriptor"], sort_keys=True)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", (64, 65))
def test_the_h100_recordings_replay_as_they_ran(seed, kind):
    """The same choice for every problem; the same summary where the live set had no problem twice
    (seed 65's normalization drew one twice, which the replay, like the generator now, counts once)."""
    live, res = _replayed(seed, kind)
    distinct = {_key(r): r["heuristic"] for r in live["rows"]}
    assert live["device"]["name"] == "NVIDIA H100 80GB HBM3" and live["evaluated"] == 100
    assert res["evaluated"] == len(distinct) and {_key(r): r["heuristic"] for r in res["rows"]} == distinct
    if len(distinct) < len(live["rows"]):
        return
    for who in ("heuristic", "baseline"):
        for key in ("geomean_efficiency", "worst_efficiency"):
            assert res["summary"][who][key] == pytest.approx(live["summary"][who][key], rel=1e-9), (who, key)
    for key in ("all", "memory_bound"):
        assert res["prediction"][key]["median_abs_rel_error"] == pytest.approx(
            live["prediction"][key]["median_abs_rel_error"], rel=1e-9)


@pytest.mark.parametrize("seed", (64, 65))
def test_on_the_h100_every_heuristic_beats_its_baseline_and_reaches_the_geomean_bar(seed):
    """What held on both seeds: each kind's geomean at least 0.97 and above the static baseline's,
    no choice failed. The worst-case and predictor bars did not all hold (the README's table)."""
    for kind in KINDS:
        _, res = _replayed(seed, kind)
        h, b = res["summary"]["heuristic"], res["summary"]["baseline"]
        assert h["choice_failed"] == 0 and h["geomean_efficiency"] >= 0.97, (kind, h)
        assert h["geomean_efficiency"] > b["geomean_efficiency"], kind


# (geomean, worst) of the heuristic's choices, replayed with the H200's corrections applied to the
# H100 (its architecture's): normalization's worst case on seed 64 rose from 0.686 and split-K's from
# 0.827; pointwise has no corrections and is as it ran. Seed 65's normalization geomean was 0.9912 before the
# fp16 scalar-load kernels were timed at their compiled register count (normalization.scalar_access): its
# fp16 layer norm 19997 x 875 now takes v1 x 8 at 128 threads (0.968 of the best) for v1 x 16 at 64 (the best).
WITH_CORRECTIONS = {(64, "normalization"): (0.9908, 0.9381), (65, "normalization"): (0.9909, 0.8722),
                    (64, "matmul_splitk"): (0.9995, 0.9497), (65, "matmul_splitk"): (1.0, 1.0)}


@pytest.mark.parametrize(("seed", "kind"), sorted(WITH_CORRECTIONS))
def test_the_h200_corrections_raise_the_h100s_choices(seed, kind):
    """Applied to the H100's profile, the corrections choose at least as well on both seeds (but for one
    problem of seed 65's normalization, below), and every choice met the worst-case bar the plain model
    missed on seed 64; the predictor's error falls."""
    _, ran = _replayed(seed, kind)
    _, res = _replayed(seed, kind, as_ran=False)
    h, before = res["summary"]["heuristic"], ran["summary"]["heuristic"]
    geomean, worst = WITH_CORRECTIONS[(seed, kind)]
    assert h["geomean_efficiency"] == pytest.approx(geomean, abs=1e-4)
    assert h["worst_efficiency"] == pytest.approx(worst, abs=1e-4)
    # seed 65's normalization: since the fp16 scalar-load kernels are timed at their compiled register count,
    # its layer norm 19997 x 875 takes v1 x 8 at 128 threads (0.968) where the plain model keeps the best,
    # and the corrected geomean (0.99088) is 0.00004 below the plain model's (0.99093); the worst cases are equal
    if (seed, kind) == (65, "normalization"):  # the one place they choose worse: pinned, not allowed for
        assert (before["geomean_efficiency"], h["geomean_efficiency"]) == pytest.approx((0.99093, 0.99088), abs=5e-6)
    else:
        assert h["geomean_efficiency"] >= before["geomean_efficiency"]
    assert h["worst_efficiency"] >= before["worst_efficiency"]
    assert h["worst_efficiency"] >= 0.85
    assert res["prediction"]["all"]["median_abs_rel_error"] < ran["prediction"]["all"]["median_abs_rel_error"]
    assert res["corrections_borrowed"] and all("fitted on NVIDIA H200, applied on NVIDIA H100 80GB HBM3" in c
                                               for c in res["corrections_borrowed"])
    assert ran["corrections_borrowed"] == []
