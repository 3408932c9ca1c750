"""Fit normalization's residual forest (calib/heuristics/normalization_residual.json.gz) from recorded
times, and judge it on the recordings it is not fitted on.

    python3 bench/fit_normalization_residual.py [--check] [--judge]

The forest (calib/heuristics/normalization/residual.py) is fitted on the H200 recordings of
tests/h200_recordings.normalization_residual_recordings(): FOLDERS (A-Z, 23-25) and the live seeds
26-44 (NORM_LIVE), each predicted with the profile its evaluation read. About 40 s.
``--check``: write nothing; exit 1 if the shipped file is not this fit (the test suite checks the same).
``--judge``: replay every normalization recording it is not fitted on (JUDGED: the H200's live seeds of
sessions 19 and 22, the H100's of sessions 21, 23, 24 and 25 with the shipped H100 profile) with and without the
forest in force, and print per group the sets' geometric mean, mean worst case and how many sets fall
below 0.85 and 0.9 of the exhaustive best (about 2 minutes)."""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from calib.heuristics import evaluate as E  # noqa: E402
from calib.heuristics.forest import write_document  # noqa: E402
from calib.heuristics.normalization import residual as NR  # noqa: E402
from calib.profile import load_profile  # noqa: E402
from h200_recordings import R, normalization_residual_recordings  # noqa: E402

H200_PROFILE = "profiles/nvidia-h200.json"
H100_PROFILE = "profiles/nvidia-h100-80gb-hbm3.json"
# What judges the forest: live recordings no model or correction is fitted on, by group (folder glob, profile).
JUDGED = {
    "H200 sessions 19, 22": (("2026-12-07-h200-heuristics-s19/*", "2026-12-07-h200-norm-s19/*",
                              "2026-12-07-h200-s22/*"), H200_PROFILE),
    "H100 sessions 21, 23": (("2026-12-07-h100-s21/*", "2026-12-07-h100-s23/*"), H100_PROFILE),
    "H100 session 24": (("2026-12-07-h100-s24/*",), H100_PROFILE),
    "H100 session 25": (("2026-12-08-h100-s25/*",), H100_PROFILE),
}


def recordings() -> list[tuple[str, str]]:
    """(evaluation, profile) pairs from the repository's root."""
    rel = R.relative_to(ROOT)
    return [(str(rel / ev), str(rel / prof)) for ev, prof in normalization_residual_recordings()]


def document() -> dict:
    return NR.residual_document(recordings(), note="bench/fit_normalization_residual.py: fitted on "
                                "tests/h200_recordings.normalization_residual_recordings()", root=ROOT)


def judged_sets() -> dict:
    """group -> [(evaluation path, profile path)] of JUDGED."""
    out = {}
    for group, (globs, prof) in JUDGED.items():
        paths = sorted({p for g in globs for p in R.glob(f"{g}/heuristics-normalization.json.gz")})
        out[group] = [(p, ROOT / prof) for p in paths]
    return out


def judge(doc: dict | None) -> dict:
    """group -> [(heuristic's geomean, worst) per set] replayed with ``doc`` in force (None: none)."""
    out = {}
    with NR.use_residual(doc), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for group, sets in judged_sets().items():
            rows = []
            for ev, prof in sets:
                res = E.evaluate("normalization", backend=f"replay:{ev}",
                                 profile=load_profile(prof, device=None, software=None))
                h = res["summary"]["heuristic"]
                rows.append((h["geomean_efficiency"], h["worst_efficiency"]))
            out[group] = rows
    return out


def _line(rows) -> str:
    geo = math.exp(sum(math.log(g) for g, _ in rows) / len(rows))
    worst = [w for _, w in rows]
    return (f"geomean {geo:.4f}, mean worst {sum(worst) / len(worst):.4f}, lowest {min(worst):.3f}, "
            f"below 0.85: {sum(w < 0.85 for w in worst)}, below 0.9: {sum(w < 0.9 for w in worst)}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Refit normalization's residual forest from the recordings and "
                                     "write it (an unknown argument is an error, not a refit).")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the shipped file is not this fit")
    parser.add_argument("--judge", action="store_true",
                        help="also replay the recordings it is not fitted on, with and without it")
    args = parser.parse_args(argv)
    doc = document()
    if args.check:
        path = NR.RESIDUAL_FILE
        same = path.exists() and NR.load_residual(path) == json.loads(json.dumps(doc))
        print("the shipped residual forest is this fit" if same else f"not this fit: {path}")
        if not same:
            return 1
    else:
        write_document(NR.RESIDUAL_FILE, doc)
        print(f"wrote {NR.RESIDUAL_FILE} from {len(doc['recordings'])} recordings, {doc['examples']} candidates")
    if args.judge:
        without, with_ = judge(None), judge(doc)
        for group in JUDGED:
            print(f"{group} ({len(with_[group])} sets of 100 problems)")
            print(f"  without the forest: {_line(without[group])}")
            print(f"  with it:            {_line(with_[group])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
