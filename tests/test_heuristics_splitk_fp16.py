"""Split-K's fp16 split-1 correction (splitk.FP16_SPLIT1_FILE): the tree of log(recorded / plain model)
over the fp16 split-1 times of the H200 recordings, checked as a file, held out one seed at a time, and
on the six live seeds nothing was fitted on (26-31).

Measured (CPU replays of the H200 recordings of 2026-12-01..03, every cuBLASLt probe as oracle): left
out one seed at a time, the memory-bound predictor median fell on 23 of the 29 recordings A-25 and met
5% on 26 (B 5.10, S 5.59, U 5.38% did not; without the correction 11 missed it, up to 5.59%), no
geomean or worst case moved and no fp16 problem was split. On seeds 26-31 with the shipped tree:
5.40 -> 4.68, 6.04 -> 3.74, 5.39 -> 4.63, 6.15 -> 4.69, 5.88 -> 4.23, 6.85 -> 4.44%.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import warnings
from pathlib import Path

import pytest

from calib.heuristics import cublaslt as CL
from calib.heuristics import evaluate as E
from calib.heuristics import splitk as SK
from calib.heuristics.predictor import q_of
from calib.profile import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import fit_fp16_split1  # noqa: E402
from h200_recordings import FOLDERS, R, SEEDS, recordings  # noqa: E402
from test_heuristics_live_h200 import SHIPPED, UNSEEN  # noqa: E402

ROOT = R.parents[1]
CALL = R / "2026-12-02-h200-session6-call1"
PROBES = (ROOT / SK.LT_PROBE_FILE, R / "2026-12-02-h200-heuristics-s4c4/cublaslt-s4c4.json",
          R / "2026-12-02-h200-heuristics-s5c5/cublaslt-s5c5.json", CALL / "cublaslt-s6c1.json.gz",
          ROOT / SK.BATCHED_PROBE_FILE, CALL / "cublaslt-batched-s6c1.json.gz",
          R / "2026-12-02-h200-heuristics-s7c1/cublaslt-s7c1.json.gz",
          R / "2026-12-02-h200-heuristics-s7c1/cublaslt-batched-s7c1.json.gz")


@pytest.fixture(autouse=True)
def fresh_state(fresh_cublaslt_state):
    """Every test here starts with cuBLASLt's state empty (conftest.fresh_cublaslt_state)."""


@pytest.fixture(scope="module")
def oracle():
    out = {}
    for p in PROBES:
        out.update(CL.load_probe(p))
    return out


def _loaded(recs):
    return [(json.loads((ROOT / ev).read_text())["rows"], q_of(load_profile(ROOT / prof, device=None, software=None)))
            for ev, prof in recs]


def test_the_correction_file_is_the_fit_of_the_recordings_it_names():
    doc = SK.load_fp16_split1()
    assert doc["device"] == "NVIDIA H200"
    assert doc["recordings"] == fit_fp16_split1.recordings()  # every recording of h200_recordings.FOLDERS
    assert len(doc["recordings"]) == len(FOLDERS)
    assert SK.fit_fp16_split1_tree(_loaded(doc["recordings"])) == doc["tree"]


@pytest.mark.parametrize(("edit", "message"), [
    ({"format": SK.SPLIT1_FORMAT}, "format"), ({"version": 2}, "version"), ({"device": ""}, "device"),
    ({"recordings": []}, "recordings"), ({"recordings": [["a.json"]]}, "recordings"),
    ({"recordings": "a.json"}, "recordings"), ({"tree": {"log_ratio": 4.0}}, "log_ratio"),
    ({"tree": {"feature": "log2_m", "threshold": "1", "le": {"log_ratio": 0}, "gt": {"log_ratio": 0}}},
     "threshold"),
])
def test_the_correction_file_is_checked_field_by_field(tmp_path, edit, message):
    doc = dict(json.loads(SK.FP16_SPLIT1_FILE.read_text()), **edit)
    p = tmp_path / "c.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(SK.HeuristicError, match=message):
        SK.load_fp16_split1(p)


def test_a_damaged_correction_file_is_named_in_the_error(tmp_path):
    p = tmp_path / "c.json"
    p.write_text('{"format": ')
    with pytest.raises(SK.HeuristicError, match="not JSON"):
        SK.load_fp16_split1(p)


def test_the_correction_applies_on_its_gpu_only_and_both_ways():
    q = q_of(load_profile(SHIPPED, device=None, software=None))
    rows = json.loads((R / recordings("matmul_splitk", names="Z")["Z"][0]).read_text())["rows"]
    factors = [SK.fp16_split1_log_factor(q, r["descriptor"]["m"], r["descriptor"]["n"], r["descriptor"]["k"])
               for r in rows if r["descriptor"]["dtype"] == "float16"]
    assert min(factors) < -0.05 and max(factors) > 0.05  # it lowers and raises
    d = SK.SplitKDescriptor(16, 128, 4096, "float16")
    plain = SK.gemm_us(q, 16, 128, 4096, 2, 2, "tensor")
    factor = math.exp(SK.fp16_split1_log_factor(q, 16, 128, 4096))
    assert factor != 1.0 and SK.model_us(d, {"split": 1}, q) == pytest.approx(plain * factor)
    q.device_name = "NVIDIA H100"
    assert SK.fp16_split1_log_factor(q, 16, 128, 4096) == 0.0
    assert SK.model_us(d, {"split": 1}, q) == plain


def test_the_simulated_device_is_not_corrected():
    from calib.backends.sim import SimBackend
    from calib.heuristics.simdevice import sim_profile

    q = q_of(sim_profile(SimBackend(seed=1)))
    assert SK.fp16_split1_log_factor(q, 16, 128, 4096) == 0.0


def _evaluate(name, oracle):
    rec, prof = (R / p for p in recordings("matmul_splitk", names=name)[name])
    with warnings.catch_warnings(), CL.use_oracle(oracle):
        warnings.simplefilter("ignore", RuntimeWarning)
        return E.evaluate("matmul_splitk", backend=f"replay:{rec}", profile=load_profile(prof, device=None,
                                                                                           software=None))


def test_left_out_one_seed_at_a_time(oracle, monkeypatch):
    """Refitted without each seed's recordings: no choice moves and no fp16 problem is split; the
    memory-bound predictor median falls on at least 22 of the 29 recordings, meets 5% on at least 26,
    and its mean falls by more than half a point."""
    doc = SK.load_fp16_split1()
    loaded = _loaded(doc["recordings"])
    seeds = [SEEDS[n] for n in FOLDERS]
    got = {}
    for i, name in enumerate(FOLDERS):
        held_out = dict(doc, tree=SK.fit_fp16_split1_tree([x for x, s in zip(loaded, seeds) if s != seeds[i]]))
        for arm, d in (("without", None), ("held_out", held_out)):
            monkeypatch.setitem(SK._fp16_split1, "doc", d)
            res = _evaluate(name, oracle)
            h = res["summary"]["heuristic"]
            half = [r for r in res["rows"] if r["descriptor"]["dtype"] == "float16"]
            assert all(r["heuristic"] == {"split": 1} for r in half), name
            got[name, arm] = (h["geomean_efficiency"], h["worst_efficiency"],
                              res["prediction"]["memory_bound"]["median_abs_rel_error"])
    assert all(got[n, "held_out"][:2] == got[n, "without"][:2] for n in FOLDERS), got
    fell = [n for n in FOLDERS if got[n, "held_out"][2] < got[n, "without"][2]]
    met = [n for n in FOLDERS if got[n, "held_out"][2] <= 0.05]
    assert len(fell) >= 22 and len(met) >= 26, got
    mean = {arm: statistics.fmean(got[n, arm][2] for n in FOLDERS) for arm in ("without", "held_out")}
    assert mean["held_out"] < mean["without"] - 0.005, mean


@pytest.mark.parametrize("seed", ["26", "27", "28", "29", "30", "31"])
def test_the_live_seeds_memory_bound_median_meets_5_percent_with_it(seed):
    """On each live seed that ran before the correction (its rows as recorded: every choice and every
    other prediction the live run's), the fp16 split-1 predictions of the shipped model bring the
    memory-bound median under 5%, where it was 5.4-6.9% live. (Seeds 32-37 ran with it: 3.5-5.7%.)"""
    folder, prof = UNSEEN[seed]
    q = q_of(load_profile(prof, device=None, software=None))
    rows = json.loads((R / folder / "heuristics-matmul_splitk.json").read_text())["rows"]
    live, now = [], []
    for r in rows:
        if not r["memory_bound"] or not r.get("predicted_us"):
            continue
        d = SK.descriptor(r["descriptor"])
        predicted = r["predicted_us"]
        live.append(abs(predicted / r["heuristic_us"] - 1))
        if d.dtype == "float16" and r["heuristic"] == {"split": 1}:
            predicted = SK.model_us(d, {"split": 1}, q)
        now.append(abs(predicted / r["heuristic_us"] - 1))
    assert len(now) >= 40
    assert statistics.median(live) > 0.05 >= statistics.median(now), (statistics.median(live), statistics.median(now))
