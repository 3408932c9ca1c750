"""A live GPU run's evaluations kept under bench/results, replayed as it ran: the residual forest it
chose with (kept beside the recordings), the profile it read. The session tests that pin a run
(tests/test_heuristics_h100_s24.py, ..._s25.py) share this."""

from __future__ import annotations

import functools
import gzip
import json
import warnings
from pathlib import Path

import pytest

from calib.heuristics import evaluate as E
from calib.heuristics import normalization as N
from calib.profile import load_profile

ROOT = Path(__file__).resolve().parents[1]
H100_PROFILE = ROOT / "profiles" / "nvidia-h100-80gb-hbm3.json"


def live(folder: Path, run: str, kind: str) -> dict:
    return json.loads(gzip.decompress((folder / run / f"heuristics-{kind}.json.gz").read_bytes()))


@functools.lru_cache(maxsize=None)  # each set replays once a session; no test edits what it returns
def replay(folder: Path, run: str, kind: str, forest: Path | str | None, profile: Path = H100_PROFILE) -> dict:
    """The evaluation replayed with ``forest`` in force: a forest file, "shipped", or None (none)."""
    doc = N.residual_forest() if forest == "shipped" else N.load_residual(forest) if forest else None
    with warnings.catch_warnings(), N.use_residual(doc):
        warnings.simplefilter("ignore")
        prof = load_profile(profile, device=None, software=None)
        return E.evaluate(kind, backend=f"replay:{folder / run / f'heuristics-{kind}.json.gz'}", profile=prof)


def assert_replays_as_it_ran(live_: dict, res: dict, device: str, evaluated: int) -> None:
    """The replay chose what the run chose, problem by problem, and summarises it the same."""
    assert live_["device"]["name"] == device and live_["failed"] == 0
    assert res["evaluated"] == live_["evaluated"] == evaluated
    assert [r["heuristic"] for r in res["rows"]] == [r["heuristic"] for r in live_["rows"]]
    for key in ("geomean_efficiency", "worst_efficiency"):
        assert res["summary"]["heuristic"][key] == pytest.approx(live_["summary"]["heuristic"][key], rel=1e-9)
    assert res["prediction"]["all"]["median_abs_rel_error"] == pytest.approx(
        live_["prediction"]["all"]["median_abs_rel_error"], rel=1e-9)


def assert_live_bars(live_: dict, miss=None) -> None:
    """Issue 14's geomean bar (and ahead of the static baseline) held; the worst-case bar (0.85) too,
    unless ``miss`` = (descriptor, chosen, efficiency) names the one problem below it."""
    h, base = live_["summary"]["heuristic"], live_["summary"]["baseline"]
    assert h["geomean_efficiency"] >= 0.97 and h["geomean_efficiency"] > base["geomean_efficiency"]
    if miss is None:
        assert h["worst_efficiency"] >= 0.85
        return
    desc, chosen, eff = miss
    low = [r for r in live_["rows"] if r.get("heuristic_us") and r["best_us"] / r["heuristic_us"] < 0.85]
    assert [(r["descriptor"], r["heuristic"]) for r in low] == [(desc, chosen)]
    assert h["worst_efficiency"] == pytest.approx(eff, abs=5e-4)
