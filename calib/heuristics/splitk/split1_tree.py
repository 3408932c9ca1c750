"""fp32 split 1's correction from traced kernels (a regression tree, splitk_fp32_split1.json), and
the checks every split-K correction file shares: its format, version, source, device, features, the
software and the architecture its recordings ran under.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .. import predictor as P
from ..registry import HeuristicError
from .gemm import gemm_us

# The shipped corrections stay beside the other heuristics' data, in calib/heuristics/.
DATA_DIR = Path(__file__).parent.parent


# cuBLAS's fp32 split-1 time where it is faster than the fastest configuration of gemm.py says (H200,
# 2026-12-02, bench/results/2026-12-02-h200-splitk-kernels/kernels.json.gz: all 455 distinct fp32 GEMMs
# of recordings A-L traced, 5 launches each). The kernels' summed time plus 3.2 us is the recorded
# split-1 time (median recorded - traced 3.0-3.4 us below 100 us on every recording, ratio
# 1.005-1.018 above it), so the traced times are cuBLAS's times. Which kernel cuBLAS runs could not be
# learned from the shape: left out one seed at a time (seeds 0-8, a seed's shapes out of the fit), a
# 1-5-nearest-neighbour or depth 3-7 tree classifier of the tile on log m, n, k, m*n, k/(m*n), m*n*k
# named it for 0.40-0.57 of the held-out shapes, and "does it run SIMT 128x64 or 64x128", the tile
# of 7 of the 12 problems below 0.85, no better than always "no" (0.87-0.89; the tile's own time
# would have fixed them: its split z, swizzled grid and this model give 0.96-0.98 of the traced
# time). Nor its time: a held-out regression tree of log(traced / model) lowered I's and J's worst
# case nowhere and dropped E, G, K (0.884/0.919/0.892 -> 0.874/0.873/0.744) when it could raise
# the prediction. Used only to lower it (min with the model), fit_split1_tree's tree (depth 6, 10
# shapes a leaf), left out one seed at a time, changed no geomean or worst case on A-L and lowered
# the fp32 split-1 |error| median on 10 of 12 recordings (I 8.0 -> 5.8%, J 6.8 -> 5.2%; H 7.7 ->
# 8.5%, L 5.6 -> 6.2% rose), p90 on 9 (E/G 23 -> 16%; A/B 14 -> 15-16%); 59 of 609 problems 5
# points better, 33 worse (C's 4688x48x17152,
# though in the fit: within 10% -> 18% low). Predictor median, all
# problems 4.5-6.0% (plain model 4.9-6.7%), memory-bound 3.5-6.2% (4.1-6.2%; H, K, L rose 0.2-0.8
# points). The file holds the tree fitted on all 455; it applies to the GPU it was traced on only,
# read from q.device_name: the choice (rank's q_of) and the evaluation's reported prediction
# (predictor.predict_model's q, which carries the profile's device name since 593ee04) both take it.
SPLIT1_FILE = DATA_DIR / "splitk_fp32_split1.json"
SPLIT1_FORMAT, SPLIT1_VERSION = "calib.heuristics.splitk_fp32_split1_correction", 3
# Each correction file records, since 2026-12-06 (this file's version 2, the fp16 and fp32 recorded
# forests' 3, the splits forest's 2), the "software" its recordings ran under: the CUDA runtime and
# CuPy (predictor.KERNEL_SOFTWARE), which chose the kernels whose times it learned. A profile of the
# GPU under another CUDA or CuPy (major.minor) gets the plain model and a warning (P.measured_on). An
# older file, which does not record it, is read forward as applying under any software, as it was
# (SOFTWARE_SINCE, in forests.py after the last of the formats).
# Since 2026-12-07 (this file's version 3, the fp16 and fp32 recorded forests' 4, the splits forest's
# 3) each also records the "compute_capability" of its GPU (predictor.recorded_arch), and applies to
# every GPU of that architecture (predictor.measured_on says why); an older file applies to its named
# GPU alone, as it did (ARCH_SINCE).
SPLIT1_FEATURES = ("log2_m", "log2_n", "log2_k", "log2_mn", "log2_k_over_mn", "log2_mnk")
SPLIT1_TREE_DEPTH, SPLIT1_MIN_LEAF = 6, 10
LAUNCH_GAP_US = 3.2  # recorded split-1 time minus the traced kernels' (see above)
_split1: dict = {}


def _features(m: int, n: int, k: int) -> dict:
    lm, ln, lk = math.log2(m), math.log2(n), math.log2(k)
    return dict(zip(SPLIT1_FEATURES, (lm, ln, lk, lm + ln, lk - lm - ln, lm + ln + lk)))


def _check_node(node, where: str, features=SPLIT1_FEATURES) -> None:
    from .. import forest

    forest.check_node(node, features, where, HeuristicError)


def _read_split1(path, where: str):
    from ..registry import read_text

    try:
        return json.loads(read_text(Path(path), "split-K split-1 correction", HeuristicError))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, or an integer of over 4300 digits
        raise HeuristicError(f"{where} is not JSON ({str(exc)[:120]})") from None


def _check_split1(doc, where: str, fmt: str, version: int, features=SPLIT1_FEATURES) -> dict:
    """``doc`` if its format, version, source, device and features are a split-1 correction's
    (``features``: the names its trees split on, in the order they were fitted)."""
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise HeuristicError(f"{where}: format must be {fmt!r}")
    if doc.get("version") != version:
        raise HeuristicError(f"{where}: version {doc.get('version')!r} is not {version}")
    for name in ("source", "device"):
        if not isinstance(doc.get(name), str) or not doc[name]:
            raise HeuristicError(f"{where}: {name!r} must be a non-empty string")
    if doc.get("features") != list(features):
        raise HeuristicError(f"{where}: features must be {list(features)}")
    from .forests import ARCH_SINCE, SOFTWARE_SINCE  # after every format, the forests' too (no cycle)

    return dict(doc, software=_check_software(doc, where, version >= SOFTWARE_SINCE.get(fmt, version + 1)),
                compute_capability=_check_arch(doc, where, version >= ARCH_SINCE.get(fmt, version + 1)))


def _check_arch(doc: dict, where: str, required: bool) -> str | None:
    """The file's "compute_capability" ("9.0"), or None in a version from before corrections
    recorded it (applied to the named GPU alone)."""
    if not required:
        return None
    cc = doc.get("compute_capability")
    if not isinstance(cc, str) or P.device_arch({"compute_capability": cc}) is None:
        raise HeuristicError(f"{where}: 'compute_capability' must be the recordings' GPU's, as \"9.0\", not {cc!r}")
    return cc


def _check_software(doc: dict, where: str, required: bool) -> dict | None:
    """The file's "software" ({name: version} of each of predictor.KERNEL_SOFTWARE), or None in a
    version from before corrections recorded it (which, like any field a version does not have, is
    not read there)."""
    if not required:
        return None
    software = doc.get("software")
    if not isinstance(software, dict) or not all(
            isinstance(software.get(name), str) and software[name] for name in P.KERNEL_SOFTWARE):
        raise HeuristicError(f"{where}: 'software' must map each of {', '.join(P.KERNEL_SOFTWARE)} to "
                             "the version its recordings ran under")
    return {name: software[name] for name in P.KERNEL_SOFTWARE}


def load_split1(path=SPLIT1_FILE, fmt: str = SPLIT1_FORMAT, version: int = SPLIT1_VERSION) -> dict:
    """The fp32 split-1 correction document at ``path``, checked field by field (HeuristicError if bad);
    one of an earlier version (no "software", no "compute_capability") is read forward."""
    where = f"split-K split-1 correction {path}"
    raw = _read_split1(path, where)
    found = raw.get("version") if isinstance(raw, dict) else None
    older = isinstance(found, int) and not isinstance(found, bool) and 1 <= found < version
    doc = _check_split1(raw, where, fmt, found if older else version)
    _check_node(doc.get("tree"), where)
    return dict(doc, version=version)


def _tree_value(node: dict, x: dict) -> float:
    from ..forest import tree_value

    return tree_value(node, x)


def split1_log_factor(q, m: int, n: int, k: int) -> float:
    """log of the factor (at most 1) that the fp32 split-1 prediction takes on the GPU the traces
    are of; 0 on any other (and on the simulated device, whose truth is the plain model)."""
    if "doc" not in _split1:
        _split1["doc"] = load_split1() if SPLIT1_FILE.exists() else None
    doc = _split1["doc"]
    if doc is None or not P.measured_on(q, doc["device"], doc["software"], "split-K's fp32 split-1 correction",
                                        doc["compute_capability"]):
        return 0.0
    return min(0.0, _tree_value(doc["tree"], _features(m, n, k)))


def _fit_tree(xs: list, ys: list, depth: int, min_leaf: int, features=SPLIT1_FEATURES) -> dict:
    """A least-squares regression tree (CART) of ``ys`` over ``xs`` (dicts of ``features``):
    forest.fit_tree, each side of a split at least ``min_leaf`` examples."""
    from .. import forest

    x = [[float(row[f]) for f in features] for row in xs]
    return forest.fit_tree(forest.np.array(x, dtype=float).reshape(len(xs), len(features)),
                           forest.np.asarray(ys, dtype=float), tuple(features), depth, min_leaf)


def fit_split1_tree(kernels: dict, q, exclude=()) -> dict:
    """The tree of log((traced kernels' mean time per call + LAUNCH_GAP_US) / plain model split 1)
    over the traced fp32 GEMMs (``kernels``: "MxNxK" -> the kernels of the traced launches, as in
    kernels.json), less the shapes in ``exclude`` (a held-out seed's)."""
    xs, ys = [], []
    for key, launches in sorted(kernels.items()):
        m, n, k = (int(v) for v in key.split("x"))
        if (m, n, k) in exclude:
            continue
        n_calls = sum("splitKreduce" not in x["name"] for x in launches) / (2 if _two_pass(launches) else 1)
        traced_us = sum(float(x["dur_us"]) for x in launches) / n_calls
        plain = gemm_us(q, m, n, k, 4, 4, "simt")
        xs.append(_features(m, n, k))
        ys.append(math.log((traced_us + LAUNCH_GAP_US) / plain))
    return _fit_tree(xs, ys, SPLIT1_TREE_DEPTH, SPLIT1_MIN_LEAF)


def _two_pass(launches) -> bool:
    """The xmma kernels that reduce with a second launch of themselves (grid z = 1) run two main
    kernels a call (58 of the 455 traced shapes: 10 launches for 5 calls)."""
    main = [x for x in launches if "splitKreduce" not in x["name"]]
    return len(main) > 1 and len({tuple(x["grid"]) for x in main}) > 1
