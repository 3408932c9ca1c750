"""Fit the split-K model's fp16 split-1 correction and write it (calib/heuristics/splitk_fp16_split1.json).

    python3 bench/fit_fp16_split1.py [--check]

The tree (splitk.fit_fp16_split1_tree) is fitted on the fp16 split-1 times of every H200 recording in
tests/h200_recordings.FOLDERS, each recording's plain model evaluated with the profile it read. The
live seeds kept out of that table (26 onwards) are what judges it. ``--check``: exit 1 if the
shipped file is not this fit (the test suite checks the same)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from calib.heuristics import splitk as SK  # noqa: E402
from calib.heuristics.predictor import q_of  # noqa: E402
from calib.profile import load_profile  # noqa: E402
from h200_recordings import FOLDERS, R  # noqa: E402


def recordings() -> list[list[str]]:
    rel = R.relative_to(ROOT)
    return [[str(rel / folder / "heuristics-matmul_splitk.json"), str(rel / prof)]
            for folder, _seed, prof in FOLDERS.values()]


def fitted(recs) -> dict:
    loaded = [(json.loads((ROOT / ev).read_text())["rows"], q_of(load_profile(ROOT / prof, device=None, software=None)))
              for ev, prof in recs]
    return SK.fit_fp16_split1_tree(loaded)


def document() -> dict:
    recs = recordings()
    return {"format": SK.FP16_SPLIT1_FORMAT, "version": SK.FP16_SPLIT1_VERSION, "device": "NVIDIA H200",
            "source": f"fit_fp16_split1_tree (depth {SK.SPLIT1_TREE_DEPTH}, at least {SK.SPLIT1_MIN_LEAF} "
                      f"problems a leaf) over the recorded fp16 split-1 times of the {len(recs)} H200 "
                      "evaluations below (tests/h200_recordings.FOLDERS), log(recorded / plain model), "
                      "each plain model with the profile its evaluation read; bench/fit_fp16_split1.py",
            "features": list(SK.SPLIT1_FEATURES), "recordings": recs, "tree": fitted(recs)}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    doc = document()
    if "--check" in argv:
        same = SK.load_fp16_split1() == json.loads(json.dumps(doc))
        print("the shipped fp16 split-1 correction is this fit" if same else "the shipped file differs from the fit")
        return 0 if same else 1
    SK.FP16_SPLIT1_FILE.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {SK.FP16_SPLIT1_FILE} from {len(doc['recordings'])} recordings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
