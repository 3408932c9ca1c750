"""Fit split-K's corrections from recorded times and write them: fp16's split-1 forest
(calib/heuristics/splitk_fp16_split1.json.gz) and fp32's two, split 1's
(calib/heuristics/splitk_fp32_split1_recorded.json.gz) and the splits' (…/splitk_fp32_splits_recorded.json.gz).

    python3 bench/fit_splitk_forests.py [--check]

splitk.fit_fp16_split1_trees (a bagged forest) over the fp16 split-1 times of every H200 recording in
tests/h200_recordings.FOLDERS and of the training evaluations (h200_recordings.TRAINING), each plain
model evaluated with the profile its evaluation read. The live seeds kept out of both (26 onwards)
are what judges it. fp32's: splitk.fit_fp32_recorded_trees and fit_fp32_splits_trees over the training
evaluations and the focused ones (h200_recordings.FOCUS), which carry the answers cuBLASLt gave live (the
fp32 model reads them, and the forests split on them; the older recordings lack them). About 80 s.
``--check``: exit 1 if a shipped file is not this fit (the test suite checks the same)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from calib.heuristics import cublaslt as CL  # noqa: E402
from calib.heuristics import splitk as SK  # noqa: E402
from calib.heuristics.forest import write_document  # noqa: E402
from calib.heuristics.predictor import q_of, recorded_arch, recorded_software  # noqa: E402
from calib.heuristics.registry import read_text  # noqa: E402
from calib.profile import load_profile  # noqa: E402
from h200_recordings import FOCUS, FOLDERS, TRAINING, R  # noqa: E402


def _pairs(table) -> list[list[str]]:
    """[evaluation, profile] of each recording, from the repository's root; the evaluations are
    stored gzip-compressed (heuristics-matmul_splitk.json.gz), as every recording under bench/results."""
    rel = R.relative_to(ROOT)
    return [[str(rel / folder / "heuristics-matmul_splitk.json.gz"), str(rel / prof)]
            for folder, _seed, prof in table.values()]


def read_evaluation(ev) -> dict:
    """The recorded evaluation at ``ev`` (from the repository's root), plain or .gz."""
    return json.loads(read_text(ROOT / ev, "recorded evaluation", SK.HeuristicError))


def recordings() -> list[list[str]]:
    """fp16's: every recording of FOLDERS, then the training evaluations."""
    return _pairs(FOLDERS) + _pairs(TRAINING)


def software_of(recs) -> dict:
    """The software every recording's profile ran under (predictor.recorded_software)."""
    return recorded_software((ROOT / ev, ROOT / prof) for ev, prof in recs)


def arch_of(recs) -> str:
    """The compute capability of the GPU every recording's profile was measured on (predictor.recorded_arch)."""
    return recorded_arch(ROOT / prof for _ev, prof in recs)


def loaded(recs) -> list[tuple]:
    """(rows, q) of each [evaluation, profile] pair."""
    return [(read_evaluation(ev)["rows"], q_of(load_profile(ROOT / prof, device=None, software=None)))
            for ev, prof in recs]


def fitted(recs) -> list:
    return SK.fit_fp16_split1_trees(loaded(recs))


def fp32_recordings() -> list[list[str]]:
    """fp32's (both forests): the training evaluations and the focused ones, those with cuBLASLt's answers."""
    return _pairs(TRAINING) + _pairs(FOCUS)


def loaded_with_answers(recs) -> list[tuple]:
    """(rows, q, the evaluation's cuBLASLt answers as an oracle) of each [evaluation, profile] pair."""
    out = []
    for ev, prof in recs:
        doc = read_evaluation(ev)
        out.append((doc["rows"], q_of(load_profile(ROOT / prof, device=None, software=None)),
                    CL.oracle_from_asked(doc["cublaslt"], ev)))
    return out


def document() -> dict:
    recs = recordings()
    return {"format": SK.FP16_SPLIT1_FORMAT, "version": SK.FP16_SPLIT1_VERSION, "device": "NVIDIA H200",
            "software": software_of(recs), "compute_capability": arch_of(recs),
            "source": f"fit_fp16_split1_trees ({SK.FOREST_TREES} trees on bootstrap samples, depth {SK.FOREST_DEPTH}, "
                      f"at least {SK.FOREST_MIN_LEAF} problems a leaf) over the recorded fp16 split-1 times, "
                      f"log(recorded / plain model), of the {len(recs)} H200 evaluations below "
                      "(tests/h200_recordings.FOLDERS and TRAINING), each plain model with the profile its "
                      "evaluation read; bench/fit_splitk_forests.py",
            "features": list(SK.SPLIT1_FEATURES), "recordings": recs, "bootstrap_seed": 0, "trees": fitted(recs)}


def _fp32_forest_document(fmt, version, fit, features, source, recorded=None) -> dict:
    """One of the fp32 forests' files: ``fit`` over the fp32 recordings (loaded with their cuBLASLt
    answers unless ``recorded`` gives them), ``source`` saying what it is between the shared parts."""
    recs = fp32_recordings()
    return {"format": fmt, "version": version, "device": "NVIDIA H200", "software": software_of(recs),
            "compute_capability": arch_of(recs),
            "source": f"{fit.__name__} ({SK.FOREST_TREES} trees on bootstrap samples, depth {SK.FOREST_DEPTH}, "
                      f"at least {SK.FOREST_MIN_LEAF} {source.format(n=len(recs))}; bench/fit_splitk_forests.py",
            "features": list(features), "recordings": recs, "bootstrap_seed": 0,
            "trees": fit(recorded or loaded_with_answers(recs))}


def fp32_document(recorded=None) -> dict:
    return _fp32_forest_document(
        SK.FP32_RECORDED_FORMAT, SK.FP32_RECORDED_VERSION, SK.fit_fp32_recorded_trees, SK.FP32_SPLIT1_FEATURES,
        "problems a leaf) over the recorded fp32 split-1 times, log(recorded / the fp32 split-1 model with the "
        "evaluation's own cuBLASLt answers), of the {n} H200 evaluations below (tests/h200_recordings.TRAINING "
        "and FOCUS), on the shape and cuBLASLt's answer", recorded)


def fp32_splits_document(recorded=None) -> dict:
    return _fp32_forest_document(
        SK.FP32_SPLITS_FORMAT, SK.FP32_SPLITS_VERSION, SK.fit_fp32_splits_trees, SK.FP32_SPLITS_FEATURES,
        "examples a leaf) over every recorded fp32 split s > 1, log(recorded / the split's model with the "
        "evaluation's own cuBLASLt answers), of the {n} H200 evaluations below (tests/h200_recordings.TRAINING "
        "and FOCUS), on the shape, the split and cuBLASLt's answer for its batched GEMM", recorded)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Refit split-K's forests from the recordings and write them "
                                     "(an unknown argument is an error, not a refit).")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a shipped file is not this fit")
    args = parser.parse_args(argv)
    recorded = loaded_with_answers(fp32_recordings())
    docs = ((SK.FP16_SPLIT1_FILE, SK.load_fp16_split1, document()),
            (SK.FP32_RECORDED_FILE, SK.load_fp32_recorded, fp32_document(recorded)),
            (SK.FP32_SPLITS_FILE, SK.load_fp32_splits, fp32_splits_document(recorded)))
    if args.check:
        bad = [str(path) for path, load, doc in docs if not path.exists() or load(path) != json.loads(json.dumps(doc))]
        print("the shipped corrections are this fit" if not bad else f"not this fit: {', '.join(bad)}")
        return 0 if not bad else 1
    for path, _load, doc in docs:
        write_document(path, doc)
        print(f"wrote {path} from {len(doc['recordings'])} recordings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
